package api

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scrape returns the samples of GET /metrics by series (name and labels).
func (e *testEnv) scrape(t *testing.T, header ...string) map[string]float64 {
	t.Helper()
	resp, data := e.request(t, "GET", "/metrics", nil, header...)
	want(t, resp, data, http.StatusOK, "")
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", ct)
	}
	out := map[string]float64{}
	for line := range strings.SplitSeq(strings.TrimSuffix(string(data), "\n"), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("bad line %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, OriginLocal)
	id := e.create(t, nil).ID
	if res := e.run(t, id, `{"args":["true"]}`); res.ExitCode != 0 {
		t.Fatalf("exec: %+v", res)
	}
	s := e.openStream(t, id, `{"args":["echo","hi"]}`)
	if _, _, last := s.finish(t); exitOf(t, last).ExitCode != 0 {
		t.Fatal("stream exec failed")
	}
	e.request(t, "GET", "/v1/sandboxes/nope", nil)
	e.request(t, "GET", "/no/such/route", nil)

	// A stream's handler records its duration and status after the client
	// has read the exit, so wait for those two series to appear.
	got := e.scrape(t)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); got = e.scrape(t) {
		_, a := got[`hutch_exec_seconds_count{mode="stream"}`]
		_, b := got[`hutch_api_requests_total{route="POST /v1/sandboxes/{id}/exec",code="101"}`]
		if a && b {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for series, want := range map[string]float64{
		`hutch_sandboxes{state="running",tier="namespace"}`:                         1,
		`hutch_sandboxes{state="starting",tier="namespace"}`:                        0,
		`hutch_sandboxes{state="stopping",tier="namespace"}`:                        0,
		`hutch_sandboxes{state="running",tier="gvisor"}`:                            0, // every tier is written
		`hutch_sandboxes_created_total{tier="namespace"}`:                           -1,
		`hutch_sandboxes_created_total{tier="gvisor"}`:                              -1,
		`hutch_sandbox_create_seconds_count`:                                        1,
		`hutch_sandbox_create_seconds_bucket{le="+Inf"}`:                            1,
		`hutch_exec_seconds_count{mode="run"}`:                                      1,
		`hutch_exec_seconds_bucket{mode="run",le="+Inf"}`:                           1,
		`hutch_exec_seconds_count{mode="stream"}`:                                   1,
		`hutch_api_requests_total{route="POST /v1/sandboxes",code="201"}`:           1,
		`hutch_api_requests_total{route="POST /v1/sandboxes/{id}/exec",code="200"}`: 1,
		`hutch_api_requests_total{route="POST /v1/sandboxes/{id}/exec",code="101"}`: 1,
		`hutch_api_requests_total{route="GET /v1/sandboxes/{id}",code="404"}`:       1,
		`hutch_api_requests_total{route="none",code="404"}`:                         1,
		`hutch_egress_bytes_total{direction="in"}`:                                  -1, // present; shared by the process
		`hutch_egress_bytes_total{direction="out"}`:                                 -1,
		`hutch_egress_refused_total`:                                                -1,
		`hutch_warm_sandboxes{template=""}`:                                         -1,
		`hutch_sandbox_create_seconds_bucket{le="10"}`:                              -1,
		`hutch_exec_seconds_bucket{mode="run",le="0.005"}`:                          -1,
	} {
		v, ok := got[series]
		switch {
		case !ok:
			t.Errorf("no series %s", series)
		case want >= 0 && v != want:
			t.Errorf("%s = %v, want %v", series, v, want)
		case v < 0:
			t.Errorf("%s = %v", series, v)
		}
	}
	for _, h := range []string{"hutch_sandbox_create_seconds", `hutch_exec_seconds{mode="run"}`, `hutch_exec_seconds{mode="stream"}`} {
		name, labels, _ := strings.Cut(h, "{")
		suffix := ""
		if labels != "" {
			suffix = "{" + labels
		}
		sum := got[name+"_sum"+suffix]
		if sum <= 0 || sum > 60 {
			t.Errorf("%s_sum = %v", h, sum)
		}
	}
	// Each scrape is counted in the next one.
	const scrapes = `hutch_api_requests_total{route="GET /metrics",code="200"}`
	before := e.scrape(t)[scrapes]
	if v := e.scrape(t)[scrapes]; before < 1 || v != before+1 {
		t.Errorf("GET /metrics counted %v then %v times, want one more", before, v)
	}

	// Destroyed sandboxes are no longer counted.
	resp, data := e.request(t, "DELETE", "/v1/sandboxes/"+id, nil)
	want(t, resp, data, http.StatusNoContent, "")
	if v := e.scrape(t)[`hutch_sandboxes{state="running",tier="namespace"}`]; v != 0 {
		t.Errorf("running after destroy: %v", v)
	}
}

// TestMetricsTenantScope: over TCP, /metrics needs a token, and a
// tenant's token gets its own series only — its sandboxes, requests,
// creates and commands — never another tenant's, nor the process-wide
// series (egress, OOM kills, the warm pool), which are the operator's.
func TestMetricsTenantScope(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, OriginRemote)
	resp, data := e.request(t, "GET", "/metrics", nil)
	want(t, resp, data, http.StatusUnauthorized, "unauthorized")
	tokens := map[string]string{}
	for _, tenant := range []string{"alice", "bob"} {
		token, err := e.m.Store().CreateToken(t.Context(), tenant)
		if err != nil {
			t.Fatal(err)
		}
		tokens[tenant] = token
	}
	auth := func(tenant string) []string { return []string{"Authorization", "Bearer " + tokens[tenant]} }
	for range 2 {
		resp, data := e.request(t, "POST", "/v1/sandboxes", nil, auth("alice")...)
		want(t, resp, data, http.StatusCreated, "")
	}
	resp, data = e.request(t, "GET", "/v1/sandboxes/sb-aaaaaaaaaaaa", nil, auth("bob")...)
	want(t, resp, data, http.StatusNotFound, "not_found")

	alice, bob := e.scrape(t, auth("alice")...), e.scrape(t, auth("bob")...)
	for series, v := range map[string]float64{
		`hutch_sandboxes{state="running",tier="namespace"}`:               2,
		`hutch_api_requests_total{route="POST /v1/sandboxes",code="201"}`: 2,
		`hutch_sandbox_create_seconds_count`:                              2,
	} {
		if alice[series] != v {
			t.Errorf("alice: %s = %v, want %v", series, alice[series], v)
		}
		if got, ok := bob[series]; ok && got != 0 {
			t.Errorf("bob sees alice's %s = %v", series, got)
		}
	}
	if v := bob[`hutch_api_requests_total{route="GET /v1/sandboxes/{id}",code="404"}`]; v != 1 {
		t.Errorf("bob's own 404: %v, want 1", v)
	}
	if _, ok := alice[`hutch_api_requests_total{route="GET /v1/sandboxes/{id}",code="404"}`]; ok {
		t.Error("alice sees bob's request")
	}
	for series := range alice {
		for _, global := range []string{"hutch_egress_", "hutch_warm_", "hutch_oom_", `code="401"`} {
			if strings.Contains(series, global) {
				t.Errorf("a tenant sees %s", series)
			}
		}
	}
	// The operator, on the socket, sees everything: both tenants'
	// requests and the refused one.
	local := newEnvOn(t, e, OriginLocal)
	all := local.scrape(t)
	for series, v := range map[string]float64{
		`hutch_sandboxes{state="running",tier="namespace"}`:                   2,
		`hutch_api_requests_total{route="POST /v1/sandboxes",code="201"}`:     2,
		`hutch_api_requests_total{route="GET /v1/sandboxes/{id}",code="404"}`: 1,
		`hutch_api_requests_total{route="GET /metrics",code="401"}`:           1,
	} {
		if all[series] != v {
			t.Errorf("operator: %s = %v, want %v", series, all[series], v)
		}
	}
	if _, ok := all[`hutch_egress_refused_total`]; !ok {
		t.Error("the operator does not see the egress series")
	}
}

// newEnvOn serves e's handler on a server of its own whose connections
// have origin.
func newEnvOn(t *testing.T, e *testEnv, origin Origin) *testEnv {
	t.Helper()
	srv := httptest.NewUnstartedServer(e.h)
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context { return WithOrigin(ctx, origin) }
	srv.Start()
	t.Cleanup(srv.Close)
	return &testEnv{m: e.m, h: e.h, srv: srv}
}
