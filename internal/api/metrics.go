package api

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/metrics"
)

// apiMetrics are what GET /metrics writes.
type apiMetrics struct {
	reg      metrics.Registry
	requests *metrics.CounterVec
	create   *metrics.Histogram
	exec     *metrics.HistogramVec
}

// countsTimeout bounds the store queries of a scrape.
const countsTimeout = 10 * time.Second

func newAPIMetrics(m Manager) *apiMetrics {
	am := &apiMetrics{
		requests: metrics.NewCounter("hutch_api_requests_total",
			"API requests by route (the pattern matched, \"none\" if none) and HTTP status.", "route", "code"),
		exec: metrics.NewHistogram("hutch_exec_seconds",
			"Duration of commands run through the API, from start to end, by mode (run or stream).", metrics.DefaultBuckets, "mode"),
	}
	create := metrics.NewHistogram("hutch_sandbox_create_seconds",
		"Duration of sandbox creations, successful or not.", metrics.DefaultBuckets)
	am.create = create.With()
	sandboxes := metrics.NewGaugeFunc("hutch_sandboxes",
		"Sandboxes of all tenants by state.", []string{"state"}, func() ([]metrics.Sample, error) {
			ctx, cancel := context.WithTimeout(context.Background(), countsTimeout)
			defer cancel()
			counts, err := m.Counts(ctx)
			if err != nil {
				return nil, err
			}
			out := make([]metrics.Sample, 0, len(daemon.CountedStates))
			for _, s := range daemon.CountedStates {
				out = append(out, metrics.Sample{Values: []string{s}, Value: float64(counts[s])})
			}
			return out, nil
		})
	am.reg.Register(am.requests, create, am.exec, sandboxes, daemon.EgressRefused, daemon.EgressBytes, daemon.WarmSandboxes, daemon.OOMKills)
	return am
}

// request counts a request.
func (am *apiMetrics) request(pattern string, code int) {
	if pattern == "" {
		pattern = "none"
	}
	am.requests.With(pattern, strconv.Itoa(code)).Inc()
}

// metrics answers with every metric in the Prometheus text format.
func (h *handler) metrics(w http.ResponseWriter, r *http.Request) error {
	var b bytes.Buffer
	if _, err := h.met.reg.WriteTo(&b); err != nil {
		return err
	}
	w.Header().Set("Content-Type", metrics.ContentType)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b.Bytes())
	return nil
}

// statusWriter notes the status of a response.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 && code >= 200 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(p)
}

// Hijack takes the connection over, for an upgrade: the status counted is
// 101.
func (s *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(s.ResponseWriter).Hijack()
	if err == nil && s.code == 0 {
		s.code = http.StatusSwitchingProtocols
	}
	return conn, brw, err
}

// Unwrap is for http.ResponseController.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// status is the status sent, 200 if none was.
func (s *statusWriter) status() int {
	if s.code == 0 {
		return http.StatusOK
	}
	return s.code
}
