package api

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/image/fetch"
	"github.com/hutch-sandbox/hutch/internal/metrics"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// apiMetrics are what GET /metrics writes: every series to the
// operator (the unix socket), and to a tenant its own series only
// (tenantSet): how many sandboxes it has, its requests, creates and
// commands. The process-wide series (egress, OOM kills, the warm pool)
// and other tenants' are the operator's.
type apiMetrics struct {
	m        Manager
	reg      metrics.Registry
	requests *metrics.CounterVec
	create   *metrics.Histogram
	exec     *metrics.HistogramVec

	mu      sync.Mutex
	tenants map[string]*tenantSet
}

// tenantSet is one tenant's series, under the names of the operator's.
type tenantSet struct {
	reg      metrics.Registry
	requests *metrics.CounterVec
	create   *metrics.Histogram
	exec     *metrics.HistogramVec
}

// countsTimeout bounds the store queries of a scrape.
const countsTimeout = 10 * time.Second

// The families GET /metrics writes for the operator and for tenants.
func newRequests() *metrics.CounterVec {
	return metrics.NewCounter("hutch_api_requests_total",
		"API requests by route (the pattern matched, \"none\" if none) and HTTP status.", "route", "code")
}

func newExec() *metrics.HistogramVec {
	return metrics.NewHistogram("hutch_exec_seconds",
		"Duration of commands run through the API, from start to end, by mode (run or stream; code: an execution of the code interpreter).", metrics.DefaultBuckets, "mode")
}

func newCreate() *metrics.HistogramVec {
	return metrics.NewHistogram("hutch_sandbox_create_seconds",
		"Duration of sandbox creations, successful or not.", metrics.DefaultBuckets)
}

// sandboxesGauge is hutch_sandboxes, by state and isolation tier, from
// counts: every state of daemon.CountedStates with every tier of
// policy.Tiers, whatever the store holds, so that the series are few and
// always the same.
func sandboxesGauge(help string, counts func(ctx context.Context) (map[store.StateTier]int, error)) *metrics.GaugeFunc {
	return metrics.NewGaugeFunc("hutch_sandboxes", help, []string{"state", "tier"}, func() ([]metrics.Sample, error) {
		ctx, cancel := context.WithTimeout(context.Background(), countsTimeout)
		defer cancel()
		c, err := counts(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]metrics.Sample, 0, len(daemon.CountedStates)*len(policy.Tiers))
		for _, s := range daemon.CountedStates {
			for _, t := range policy.Tiers {
				out = append(out, metrics.Sample{Values: []string{s, t}, Value: float64(c[store.StateTier{State: s, Tier: t}])})
			}
		}
		return out, nil
	})
}

// newAPIMetrics makes the API's metrics; more are the operator's
// families of the other front ends.
func newAPIMetrics(m Manager, more []metrics.Collector) *apiMetrics {
	am := &apiMetrics{m: m, requests: newRequests(), exec: newExec(), tenants: map[string]*tenantSet{}}
	create := newCreate()
	am.create = create.With()
	sandboxes := sandboxesGauge("Sandboxes of all tenants by state.", m.Counts)
	am.reg.Register(am.requests, create, am.exec, sandboxes, daemon.SandboxesCreated, daemon.EgressRefused, daemon.EgressBytes, daemon.WarmSandboxes, daemon.WarmMemory, daemon.WarmCreates, daemon.OOMKills, FrontRequests,
		daemon.ImageCache, fetch.Layers, fetch.Bytes, fetch.UnpackSeconds)
	am.reg.Register(more...)
	return am
}

// tenant returns the series of tenant, made on first use ("" has none:
// a request that was not authenticated).
func (am *apiMetrics) tenant(tenant string) *tenantSet {
	if tenant == "" {
		return nil
	}
	am.mu.Lock()
	defer am.mu.Unlock()
	if ts := am.tenants[tenant]; ts != nil {
		return ts
	}
	ts := &tenantSet{requests: newRequests(), exec: newExec()}
	create := newCreate()
	ts.create = create.With()
	sandboxes := sandboxesGauge("Sandboxes of this tenant by state.", func(ctx context.Context) (map[store.StateTier]int, error) {
		infos, err := am.m.List(ctx, tenant, nil, "")
		if err != nil {
			return nil, err
		}
		c := map[store.StateTier]int{}
		for _, i := range infos {
			c[store.StateTier{State: i.State, Tier: i.Tier}]++
		}
		return c, nil
	})
	ts.reg.Register(ts.requests, create, ts.exec, sandboxes)
	am.tenants[tenant] = ts
	return ts
}

// request counts a request of tenant ("" when it was not authenticated).
func (am *apiMetrics) request(tenant, pattern string, code int) {
	if pattern == "" {
		pattern = "none"
	}
	am.requests.With(pattern, strconv.Itoa(code)).Inc()
	if ts := am.tenant(tenant); ts != nil {
		ts.requests.With(pattern, strconv.Itoa(code)).Inc()
	}
}

// created records how long a create of tenant took.
func (am *apiMetrics) created(tenant string, d time.Duration) {
	am.create.Observe(d.Seconds())
	if ts := am.tenant(tenant); ts != nil {
		ts.create.Observe(d.Seconds())
	}
}

// ran records how long a command of tenant ran, by mode.
func (am *apiMetrics) ran(tenant, mode string, d time.Duration) {
	am.exec.With(mode).Observe(d.Seconds())
	if ts := am.tenant(tenant); ts != nil {
		ts.exec.With(mode).Observe(d.Seconds())
	}
}

// metrics answers with the metrics in the Prometheus text format: every
// series to the operator (the unix socket), the tenant's own to a
// tenant's token. Decision: scoped rather than refused, so that a tenant
// can watch its own use without learning anything of other tenants'.
func (h *handler) metrics(w http.ResponseWriter, r *http.Request) error {
	reg := &h.met.reg
	if OriginOf(r.Context()) != OriginLocal {
		reg = &h.met.tenant(tenantOf(r)).reg
	}
	var b bytes.Buffer
	if _, err := reg.WriteTo(&b); err != nil {
		return err
	}
	w.Header().Set("Content-Type", metrics.ContentType)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b.Bytes())
	return nil
}

// FrontRequests counts the requests of the front ends mounted beside the
// API on its listeners (E2B's API, envd, MCP and its links and ports), for
// the operator's GET /metrics (Config.Metrics). Like
// hutch_api_requests_total, it counts what the audit log does not hold:
// refusals before a route or tool ran (401, 403, 413, 429), which have
// no tenant or change nothing.
var FrontRequests = metrics.NewCounter("hutch_front_requests_total",
	"Requests of the front ends beside hutch's API (e2b, envd, mcp, mcp_links, mcp_ports, ui: every request under /ui/, its API calls too) by HTTP status, refusals before any route or tool ran included.", "front", "code")

// Counted serves r with h and counts it in FrontRequests as front's, by
// the status it was answered with.
func Counted(front string, h http.Handler, w http.ResponseWriter, r *http.Request) {
	sw := &statusWriter{ResponseWriter: w}
	defer func() { FrontRequests.With(front, strconv.Itoa(sw.status())).Inc() }()
	h.ServeHTTP(sw, r)
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
