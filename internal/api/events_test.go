package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/daemon"
)

// TestEvents: the events of a create, an exec and a destroy arrive in
// order on the NDJSON stream, which ends after "ended"; another tenant
// gets 404.
func TestEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, OriginRemote)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tokA, err := e.m.Store().CreateToken(ctx, "tenant-a")
	if err != nil {
		t.Fatal(err)
	}
	tokB, err := e.m.Store().CreateToken(ctx, "tenant-b")
	if err != nil {
		t.Fatal(err)
	}
	authA, authB := []string{"Authorization", "Bearer " + tokA}, []string{"Authorization", "Bearer " + tokB}

	resp, data := e.request(t, "POST", "/v1/sandboxes", nil, authA...)
	want(t, resp, data, http.StatusCreated, "")
	var info daemon.Info
	if err := json.Unmarshal(data, &info); err != nil {
		t.Fatal(err)
	}
	resp, data = e.request(t, "GET", "/v1/sandboxes/"+info.ID+"/events", nil, authB...)
	want(t, resp, data, http.StatusNotFound, CodeNotFound)
	resp, data = e.request(t, "GET", "/v1/sandboxes/"+info.ID+"/events?since=x", nil, authA...)
	want(t, resp, data, http.StatusBadRequest, CodeInvalid)

	// Follow the stream live while the exec and the destroy happen.
	req, err := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/v1/sandboxes/"+info.ID+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(authA[0], authA[1])
	stream, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	if stream.StatusCode != http.StatusOK || stream.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("events: %d %q", stream.StatusCode, stream.Header.Get("Content-Type"))
	}
	lines := bufio.NewScanner(stream.Body)
	next := func() daemon.Event {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("the stream ended early: %v", lines.Err())
		}
		var ev daemon.Event
		if err := json.Unmarshal(lines.Bytes(), &ev); err != nil {
			t.Fatalf("event %q: %v", lines.Bytes(), err)
		}
		return ev
	}
	for _, typ := range []string{daemon.EventCreated, daemon.EventStarted} {
		if ev := next(); ev.Type != typ {
			t.Fatalf("event %+v, want %s", ev, typ)
		}
	}
	resp, data = e.request(t, "POST", "/v1/sandboxes/"+info.ID+"/exec", `{"args":["sh","-c","exit 3"]}`, authA...)
	want(t, resp, data, http.StatusOK, "")
	var res RunResult
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	ev := next()
	if ev.Type != daemon.EventExec || ev.Data["pid"] != float64(res.PID) {
		t.Fatalf("event %+v, want exec of pid %d", ev, res.PID)
	}
	ev = next()
	if ev.Type != daemon.EventExit || ev.Data["pid"] != float64(res.PID) || ev.Data["code"] != float64(3) {
		t.Fatalf("event %+v, want exit 3 of pid %d", ev, res.PID)
	}
	resp, data = e.request(t, "DELETE", "/v1/sandboxes/"+info.ID, nil, authA...)
	want(t, resp, data, http.StatusNoContent, "")
	last := ev.Seq
	for _, typ := range []string{daemon.EventDestroyed, daemon.EventEnded} {
		ev := next()
		if ev.Type != typ || ev.Seq != last+1 {
			t.Fatalf("event %+v, want %s with seq %d", ev, typ, last+1)
		}
		last = ev.Seq
	}
	if lines.Scan() {
		t.Fatalf("more after ended: %q", lines.Text())
	}

	// Replay since: only the last two.
	resp, data = e.request(t, "GET", "/v1/sandboxes/"+info.ID+"/events?since="+strconv.FormatInt(last-2, 10), nil, authA...)
	want(t, resp, data, http.StatusOK, "")
	if n := bytes.Count(data, []byte("\n")); n != 2 {
		t.Errorf("since %d: %d events, want 2: %s", last-2, n, data)
	}
}
