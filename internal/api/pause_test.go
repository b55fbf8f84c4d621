package api

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// TestPauseResume: pause and resume answer with the sandbox; a paused
// sandbox refuses commands and files at once (409, saying it is paused);
// pausing twice and resuming a running sandbox are conflicts; another
// tenant's sandbox is not found; both calls are audited.
func TestPauseResume(t *testing.T) {
	t.Parallel()
	e, path := newAuditedEnv(t, OriginRemote)
	ctx := context.Background()
	tokA, err := e.m.Store().CreateToken(ctx, "tenant-a")
	if err != nil {
		t.Fatal(err)
	}
	tokB, err := e.m.Store().CreateToken(ctx, "tenant-b")
	if err != nil {
		t.Fatal(err)
	}
	asA := []string{"Authorization", "Bearer " + tokA}
	asB := []string{"Authorization", "Bearer " + tokB}
	resp, data := e.request(t, "POST", "/v1/sandboxes", nil, asA...)
	want(t, resp, data, 201, "")
	var info daemon.Info
	if err := json.Unmarshal(data, &info); err != nil {
		t.Fatal(err)
	}
	sb := "/v1/sandboxes/" + info.ID

	resp, data = e.request(t, "POST", sb+"/pause", nil, asB...)
	want(t, resp, data, 404, CodeNotFound)
	resp, data = e.request(t, "POST", sb+"/resume", nil, asA...)
	want(t, resp, data, 409, CodeConflict)

	resp, data = e.request(t, "POST", sb+"/pause", "{}", asA...)
	want(t, resp, data, 200, "")
	var got daemon.Info
	if err := json.Unmarshal(data, &got); err != nil || got.ID != info.ID || got.State != store.StatePaused {
		t.Fatalf("pause answered %s (%v), want the paused sandbox", data, err)
	}
	if n := e.scrape(t, asA...)[`hutch_sandboxes{state="paused",tier="namespace"}`]; n != 1 {
		t.Errorf(`hutch_sandboxes{state="paused",tier="namespace"} = %v, want 1`, n)
	}
	resp, data = e.request(t, "POST", sb+"/pause", nil, asA...)
	want(t, resp, data, 409, CodeConflict, "paused")
	resp, data = e.request(t, "POST", sb+"/exec", `{"args":["true"]}`, asA...)
	want(t, resp, data, 409, CodeConflict, "paused")
	resp, data = e.request(t, "GET", sb+"/files?path=/", nil, asA...)
	want(t, resp, data, 409, CodeConflict, "paused")
	resp, data = e.request(t, "POST", sb+"/pause", `{"x":1}`, asA...)
	want(t, resp, data, 400, CodeInvalid)
	resp, data = e.request(t, "GET", sb, nil, asA...)
	want(t, resp, data, 200, "")
	if err := json.Unmarshal(data, &got); err != nil || got.State != store.StatePaused {
		t.Errorf("get answered %s (%v), want paused", data, err)
	}

	resp, data = e.request(t, "POST", sb+"/resume", nil, asB...)
	want(t, resp, data, 404, CodeNotFound)
	resp, data = e.request(t, "POST", sb+"/resume", nil, asA...)
	want(t, resp, data, 200, "")
	if err := json.Unmarshal(data, &got); err != nil || got.State != store.StateRunning {
		t.Fatalf("resume answered %s (%v), want the running sandbox", data, err)
	}
	resp, data = e.request(t, "POST", sb+"/exec", `{"args":["true"]}`, asA...)
	want(t, resp, data, 200, "")

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var actions []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var en audit.Entry
		if err := json.Unmarshal(sc.Bytes(), &en); err != nil {
			t.Fatal(err)
		}
		if en.Action == "pause" || en.Action == "resume" {
			actions = append(actions, en.Action+":"+en.Tenant+":"+en.Error)
		}
	}
	wantActions := []string{
		"pause:tenant-b:not_found", "resume:tenant-a:conflict", "pause:tenant-a:", "pause:tenant-a:conflict",
		"pause:tenant-a:invalid", "resume:tenant-b:not_found", "resume:tenant-a:",
	}
	if len(actions) != len(wantActions) {
		t.Fatalf("audited %v, want %v", actions, wantActions)
	}
	for i := range actions {
		if actions[i] != wantActions[i] {
			t.Errorf("audit entry %d: %s, want %s", i, actions[i], wantActions[i])
		}
	}
}
