package api

import (
	"net/http"
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
		`hutch_sandboxes{state="running"}`:                                          1,
		`hutch_sandboxes{state="starting"}`:                                         0,
		`hutch_sandboxes{state="stopping"}`:                                         0,
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
		`hutch_warm_sandboxes`:                                                      -1,
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
	if v := e.scrape(t)[`hutch_sandboxes{state="running"}`]; v != 0 {
		t.Errorf("running after destroy: %v", v)
	}
}

func TestMetricsNeedsToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, OriginRemote)
	resp, data := e.request(t, "GET", "/metrics", nil)
	want(t, resp, data, http.StatusUnauthorized, "unauthorized")
	token, err := e.m.Store().CreateToken(t.Context(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	got := e.scrape(t, "Authorization", "Bearer "+token)
	if v := got[`hutch_api_requests_total{route="GET /metrics",code="401"}`]; v != 1 {
		t.Errorf("the refused scrape counted %v times, want 1", v)
	}
}
