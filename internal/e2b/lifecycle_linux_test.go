package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/gvisor/gvisortest"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// createWith makes a sandbox for tenant with body and returns its id and
// access token.
func (f *realFixture) createWith(t *testing.T, tenant, body string) (string, string) {
	t.Helper()
	w := f.as(tenant, "POST", "/v2/sandboxes", body)
	if w.Code != http.StatusCreated {
		t.Fatalf("create %s for %s: %d %s", body, tenant, w.Code, w.Body)
	}
	var sb sandboxJSON
	if err := json.Unmarshal(w.Body.Bytes(), &sb); err != nil {
		t.Fatal(err)
	}
	return sb.SandboxID, sb.EnvdAccessToken
}

// callEnvd calls envd's unary procedure proc on sandbox id with token tok.
func (f *realFixture) callEnvd(proc, body, id, tok string) (int, string) {
	w := f.do("POST", "/"+proc, body, "E2b-Sandbox-Id", id, "X-Access-Token", tok, "Content-Type", "application/json")
	return w.Code, w.Body.String()
}

// waitE2BState waits for tenant's sandbox id to be in state (hutch's).
func (f *realFixture) waitE2BState(t *testing.T, tenant, id, state string) {
	t.Helper()
	var got string
	if !testutil.Eventually(time.Minute, func() bool {
		info, err := f.dm.Get(context.Background(), tenant, id)
		got = info.State
		return err == nil && got == state
	}) {
		t.Fatalf("sandbox %s is %q, want %q", id, got, state)
	}
}

// expire sets tenant's sandbox id to time out in a second.
func (f *realFixture) expire(t *testing.T, tenant, id string) {
	t.Helper()
	if w := f.as(tenant, "POST", "/sandboxes/"+id+"/timeout", `{"timeout":1}`); w.Code != http.StatusNoContent {
		t.Fatalf("timeout of %s: %d %s", id, w.Code, w.Body)
	}
}

// detail is GET /sandboxes/{id}.
func (f *realFixture) detail(t *testing.T, tenant, id string) detailJSON {
	t.Helper()
	w := f.as(tenant, "GET", "/sandboxes/"+id, "")
	if w.Code != http.StatusOK {
		t.Fatalf("get %s: %d %s", id, w.Code, w.Body)
	}
	var d detailJSON
	if err := json.Unmarshal(w.Body.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// gvisorDaemon is a daemon config whose default tier is gVisor
// (gvisortest.Runtime).
func gvisorDaemon(t *testing.T) daemon.Config {
	t.Helper()
	return daemon.Config{DefaultTier: policy.TierGVisor, Runtimes: gvisortest.Runtimes(t)}
}

// TestE2BLifecycle, in both tiers: autoPause pauses a sandbox on its
// timeout (getInfo says paused, and its lifecycle); without autoResume an
// envd request is refused as for any paused sandbox (502) and only
// connect resumes it; with it, an envd request resumes it (a health check
// does not), many at once resume it once, and another tenant can neither
// wake nor learn of it; autoPauseMemory false pauses it without memory,
// and connect boots it again (a new boot ID, its files kept).
func TestE2BLifecycle(t *testing.T) {
	for _, tier := range []string{policy.TierNamespace, policy.TierGVisor} {
		t.Run(tier, func(t *testing.T) {
			var cfg daemon.Config
			var opts []Option
			if tier == policy.TierGVisor {
				cfg, opts = gvisorDaemon(t), []Option{WithoutInternet()}
			}
			f := newRealFixtureWith(t, cfg, opts...)
			testLifecycle(t, f)
		})
	}
}

func testLifecycle(t *testing.T, f *realFixture) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const list = "process.Process/List"

	// Without autoResume: a request stays refused, connect resumes.
	id, tok := f.createWith(t, "alice", `{"templateID":"base","timeout":300,"autoPause":true,"autoResume":{"enabled":false}}`)
	if d := f.detail(t, "alice", id); d.Lifecycle == nil || *d.Lifecycle != (lifecycleJSON{OnTimeout: "pause"}) {
		t.Errorf("lifecycle %+v, want onTimeout pause without autoResume", d.Lifecycle)
	}
	f.expire(t, "alice", id)
	f.waitE2BState(t, "alice", id, store.StatePaused)
	if d := f.detail(t, "alice", id); d.State != "paused" {
		t.Errorf("state %q after the timeout", d.State)
	}
	if code, body := f.callEnvd(list, `{}`, id, tok); code != http.StatusBadGateway {
		t.Errorf("envd on a paused sandbox without autoResume: %d %s", code, body)
	}
	if st, _ := f.dm.Get(ctx, "alice", id); st.State != store.StatePaused {
		t.Errorf("a request resumed a sandbox without autoResume: %s", st.State)
	}
	if w := f.as("alice", "POST", "/v2/sandboxes/"+id+"/connect", `{"timeout":300}`); w.Code != http.StatusCreated {
		t.Fatalf("connect: %d %s", w.Code, w.Body)
	}
	if code, body := f.callEnvd(list, `{}`, id, tok); code != http.StatusOK {
		t.Errorf("envd after connect: %d %s", code, body)
	}

	// With autoResume: a request wakes it, once for many.
	id, tok = f.createWith(t, "alice", `{"templateID":"base","timeout":300,"autoPause":true,"autoResume":{"enabled":true}}`)
	if d := f.detail(t, "alice", id); d.Lifecycle == nil || *d.Lifecycle != (lifecycleJSON{OnTimeout: "pause", AutoResume: true}) {
		t.Errorf("lifecycle %+v, want onTimeout pause with autoResume", d.Lifecycle)
	}
	f.expire(t, "alice", id)
	f.waitE2BState(t, "alice", id, store.StatePaused)
	if w := f.do("GET", "/health", "", "E2b-Sandbox-Id", id, "X-Access-Token", tok); w.Code != http.StatusBadGateway {
		t.Errorf("health of the paused sandbox: %d %s", w.Code, w.Body)
	}
	if st, _ := f.dm.Get(ctx, "alice", id); st.State != store.StatePaused {
		t.Errorf("a health check resumed the sandbox: %s", st.State)
	}
	// Bob, with the sandbox's id, neither wakes it nor learns it exists.
	if err := f.h.Wake(ctx, "bob", id); !errors.Is(err, daemon.ErrNotFound) {
		t.Errorf("bob's wake of alice's sandbox: %v, want not found", err)
	}
	if st, _ := f.dm.Get(ctx, "alice", id); st.State != store.StatePaused {
		t.Errorf("bob's wake resumed alice's sandbox: %s", st.State)
	}
	events, err := f.dm.Events(ctx, "alice", id, 0)
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		wg.Go(func() { codes[i], _ = f.callEnvd(list, `{}`, id, tok) })
	}
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusOK {
			t.Errorf("request %d to the paused sandbox with autoResume: %d", i, c)
		}
	}
	if d := f.detail(t, "alice", id); d.State != "running" {
		t.Errorf("state %q after the requests", d.State)
	}
	// Its timeout pauses it again: between the two pauses, one resume.
	f.expire(t, "alice", id)
	f.waitE2BState(t, "alice", id, store.StatePaused)
	pauses, resumes := 0, 0
	for e := range events {
		switch e.Type {
		case daemon.EventPaused:
			pauses++
		case daemon.EventResumed:
			resumes++
		}
		if pauses == 2 {
			break
		}
	}
	if resumes != 1 {
		t.Errorf("%d requests at once resumed the sandbox %d times, want once", n, resumes)
	}
	if err := f.h.Wake(ctx, "alice", id); err != nil {
		t.Errorf("wake: %v", err)
	}
	if err := f.h.Wake(ctx, "alice", id); err != nil {
		t.Errorf("wake of a running sandbox: %v", err)
	}

	// Filesystem-only: traffic never resumes it; connect boots it again.
	if w := f.as("alice", "POST", "/v2/sandboxes", `{"templateID":"base","autoPause":true,"autoPauseMemory":false,"autoResume":{"enabled":true}}`); w.Code != http.StatusBadRequest ||
		!strings.Contains(w.Body.String(), "filesystem-only") {
		t.Errorf("autoResume with autoPauseMemory false: %d %s", w.Code, w.Body)
	}
	id, tok = f.createWith(t, "alice", `{"templateID":"base","timeout":300,"autoPause":true,"autoPauseMemory":false}`)
	boot := func() string {
		t.Helper()
		return strings.TrimSpace(f.readFile(t, "alice", id, "/proc/sys/kernel/random/boot_id"))
	}
	c, err := f.dm.Agent(ctx, "alice", id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteFile(ctx, Workspace+"/kept.txt", strings.NewReader("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := boot()
	f.expire(t, "alice", id)
	f.waitE2BState(t, "alice", id, store.StatePaused)
	if err := f.h.Wake(ctx, "alice", id); !errors.Is(err, ErrNoAutoResume) {
		t.Errorf("wake of a sandbox paused without memory: %v", err)
	}
	if w := f.as("alice", "POST", "/v2/sandboxes/"+id+"/connect", `{"timeout":300}`); w.Code != http.StatusCreated {
		t.Fatalf("connect: %d %s", w.Code, w.Body)
	}
	if after := boot(); after == before {
		t.Errorf("connected after a pause without memory, the boot id is still %s", before)
	}
	if got := f.readFile(t, "alice", id, Workspace+"/kept.txt"); got != "kept" {
		t.Errorf("the file after the cold boot: %q", got)
	}
	_ = tok
}
