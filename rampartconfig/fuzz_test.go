package rampartconfig

import (
	"testing"
)

// FuzzLoad feeds malformed documents to the loader: it returns an error
// or a document, never panics, and a document it returns builds (and
// closes).
func FuzzLoad(f *testing.F) {
	for _, s := range []string{full, "", "{}", "breakers: {a: {}}", "pipelines: {p: {breaker: {ref: a}}}",
		"adaptiveLimiters: {a: {algorithm: {vegas: {}}, queue: {maxLength: 3}}}", "timeouts: {t: {duration: 5}}"} {
		f.Add([]byte(s), uint8(YAML))
	}
	for _, s := range []string{`{"breakers": {"a": {"failureRateThreshold": 150}}}`, `{"bulkheads": {"k": {"max": 2, "maxWait": "1s"}}}`,
		`{"pipelines": {"p": {"retry": {"maxAttempts": 2}, "timeout": {"duration": "1s"}}}}`, `[1, 2]`, `{"breakers": null}`} {
		f.Add([]byte(s), uint8(JSON))
	}
	f.Fuzz(func(t *testing.T, data []byte, format uint8) {
		doc, err := Load(data, Format(format%2))
		if err != nil {
			return
		}
		l, err := Build(doc, Options{})
		if err != nil {
			t.Fatalf("Load accepted a document Build refuses: %v\n%s", err, data)
		}
		_ = l.Close()
	})
}
