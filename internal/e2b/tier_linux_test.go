package e2b

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// recordingRuntime stands for a tier hutch serve does not run yet: it
// records the tiers of the specs it is asked to start and starts nothing.
type recordingRuntime struct {
	tier string

	mu    sync.Mutex
	tiers []string
}

func (r *recordingRuntime) Tier() string { return r.tier }

func (r *recordingRuntime) Run(context.Context, sandbox.Config) (sandbox.Result, error) {
	return sandbox.Result{}, errors.New("the test's runtime runs nothing")
}

func (r *recordingRuntime) Start(c sandbox.Config) (sandbox.Instance, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tiers = append(r.tiers, c.Spec.Tier)
	return nil, errors.New("the test's runtime starts nothing")
}

func (r *recordingRuntime) started() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.tiers)
}

// TestE2BTier: E2B's create names no tier and gets the daemon's default:
// namespace by default, which the record and the create's audit entry
// say; gvisor in a daemon whose default it is, whose runtime starts it
// (here a runtime that starts nothing: the create fails, and nothing runs
// under namespaces instead).
func TestE2BTier(t *testing.T) {
	f := newRealFixture(t)
	id, _ := f.create(t, "alice")
	if info, err := f.dm.Get(context.Background(), "alice", id); err != nil || info.Tier != policy.TierNamespace {
		t.Errorf("E2B's sandbox: %+v, %v; want tier namespace", info, err)
	}
	var entry audit.Entry
	testutil.Eventually(time.Minute, func() bool {
		i := slices.IndexFunc(readAudit(t, f.auditPath), func(e audit.Entry) bool { return e.Sandbox == id && e.Action == "create" })
		if i >= 0 {
			entry = readAudit(t, f.auditPath)[i]
		}
		return i >= 0
	})
	if entry.Tier != policy.TierNamespace {
		t.Errorf("the create's audit entry: %+v; want tier namespace", entry)
	}

	gv := &recordingRuntime{tier: policy.TierGVisor}
	g := newRealFixtureWith(t, daemon.Config{DefaultTier: policy.TierGVisor, Runtimes: map[string]sandbox.Runtime{
		policy.TierNamespace: sandbox.Namespaces{},
		policy.TierGVisor:    gv,
	}}, WithoutInternet()) // the gvisor tier has no egress proxy yet
	w := g.as("alice", "POST", "/v2/sandboxes", `{"templateID":"base","timeout":300}`)
	if w.Code == http.StatusCreated {
		t.Fatalf("create in a daemon of default tier gvisor whose runtime starts nothing: %d %s", w.Code, w.Body)
	}
	if got := gv.started(); !slices.Equal(got, []string{policy.TierGVisor}) {
		t.Errorf("the gvisor runtime was asked to start %q (%d %s), want one sandbox of tier gvisor", got, w.Code, w.Body)
	}
	list, err := g.dm.List(context.Background(), "alice", nil, store.StateStopped)
	if err != nil || len(list) != 1 || list[0].Tier != policy.TierGVisor {
		t.Errorf("the failed create's record: %+v, %v; want one of tier gvisor", list, err)
	}
}
