package chaos

import (
	"context"
	"errors"
	"net/http"
	"strconv"
)

// RoundTripper returns next (http.DefaultTransport when nil) with the
// injector's faults in front of it, as an HTTP client sees a failing
// server or network: an injected latency is waited before the request is
// sent (a request whose context ends during it fails with the context's
// error, unsent); an injected error is returned as the transport's error
// (http.Client wraps it in a *url.Error); a substituted result is a
// response with Config.Status, an empty body and, when Config.RetryAfter
// is set, a Retry-After header; an injected panic panics in RoundTrip. A
// request that is not sent has its body closed, as the RoundTripper
// contract asks.
func (inj *Injector) RoundTripper(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &roundTripper{inj: inj, next: next}
}

type roundTripper struct {
	inj  *Injector
	next http.RoundTripper
}

// RoundTrip sends req through the injector's faults; see
// [Injector.RoundTripper].
func (t *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	inj := t.inj
	if !inj.enabled.Load() {
		return t.next.RoundTrip(req)
	}
	act, err := inj.inject(req.Context(), true)
	if act == run {
		return t.next.RoundTrip(req)
	}
	if req.Body != nil {
		_ = req.Body.Close()
	}
	switch act {
	case panicking:
		panic(inj.panicValue)
	case substituting:
		return inj.response(req), nil
	default:
		return nil, err
	}
}

// response builds a substituted response to req.
func (inj *Injector) response(req *http.Request) *http.Response {
	h := make(http.Header, 1)
	if inj.retryAfter != "" {
		h["Retry-After"] = []string{inj.retryAfter}
	}
	return &http.Response{
		Status:        strconv.Itoa(inj.status) + " " + http.StatusText(inj.status),
		StatusCode:    inj.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          http.NoBody,
		ContentLength: 0,
		Request:       req,
	}
}

// Handler returns next with the injector's faults in front of it, as a
// client sees a failing server: an injected latency is waited before next
// runs; an injected panic panics in ServeHTTP (net/http, or a recovering
// middleware outside, deals with it); an injected error is a 500 with the
// error's text; a substituted result is Config.Status with an empty body
// and, when Config.RetryAfter is set, a Retry-After header. A request
// whose context ends during the latency is answered 504 (Gateway Timeout)
// when its deadline passed and 503 otherwise, without running next. A nil
// next means http.DefaultServeMux, as for http.Server.
func (inj *Injector) Handler(next http.Handler) http.Handler {
	if next == nil {
		next = http.DefaultServeMux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !inj.enabled.Load() {
			next.ServeHTTP(w, r)
			return
		}
		switch act, err := inj.inject(r.Context(), true); act {
		case run:
			next.ServeHTTP(w, r)
		case panicking:
			panic(inj.panicValue)
		case substituting:
			if inj.retryAfter != "" {
				w.Header().Set("Retry-After", inj.retryAfter)
			}
			w.WriteHeader(inj.status)
		case interrupted:
			code := http.StatusServiceUnavailable
			if errors.Is(err, context.DeadlineExceeded) {
				code = http.StatusGatewayTimeout
			}
			http.Error(w, err.Error(), code)
		default:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
}
