package httpguard_test

import (
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/httpguard"
	"github.com/rampart-go/rampart/pipeline"
)

// A huge DefaultRetryAfter (which NewHandler accepts) must not wrap around
// to "Retry-After: 1" when rounded up to whole seconds.
func TestServerHugeRetryAfterDoesNotWrap(t *testing.T) {
	bh, err := bulkhead.New(bulkhead.Config{Max: 1})
	require.NoError(t, err)
	require.True(t, bh.TryEnter()) // the bulkhead is full
	defer bh.Exit()
	h, err := httpguard.NewHandler(http.NotFoundHandler(), httpguard.ServerConfig{
		Pipeline:          mustPipeline(t, pipeline.Config{Bulkhead: bh}),
		DefaultRetryAfter: time.Duration(math.MaxInt64),
	})
	require.NoError(t, err)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.Equal(t, "9223372037", w.Header().Get("Retry-After"))
}
