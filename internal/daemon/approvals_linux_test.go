package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/approve"
	"github.com/hutch-sandbox/hutch/internal/changes"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// approvalSpec asks about git push and about unknown hosts, denies rm,
// and allows the rest.
func approvalSpec() policy.Spec {
	return policy.Spec{
		Approvals: policy.Approvals{Preset: "full", Commands: []policy.CommandRule{
			{Action: "ask", Args: []string{"git", "push"}},
			{Action: "deny", Args: []string{"rm"}},
		}},
		Network: policy.Network{AllowedDomains: []string{"allowed.test"}, OnUnknown: "ask"},
	}
}

// question waits for the one question of tenant's sandbox id.
func question(t *testing.T, m *Manager, tenant, id string) approve.Pending {
	t.Helper()
	var list []approve.Pending
	testutil.Eventually(time.Minute, func() bool {
		list = m.Approvals(tenant, id)
		return len(list) > 0
	})
	if len(list) != 1 {
		t.Fatalf("the questions of %s: %+v, want one", id, list)
	}
	return list[0]
}

// pushed runs "touch MARKER; git push" in sandbox id as tenant a, in the
// background; its error arrives on the channel.
func pushed(m *Manager, id, marker string) <-chan error {
	ch := make(chan error, 1)
	go func() {
		_, _, err := run(context.Background(), m, "a", id, "touch "+marker+"; git push")
		ch <- err
	}()
	return ch
}

// TestApprovalGate, under each tier: a sandbox's approvals hold its
// commands in the daemon's broker, a tenant's own to answer (the other
// tenant sees nothing and answers nothing); its proxy's hook of
// network.on_unknown: ask puts the host to the same broker; a deny rule
// refuses without a question. Under gVisor, a sandbox paused to disk and
// resumed by the next daemon still has its approvals (they are in its
// recorded policy).
func TestApprovalGate(t *testing.T) {
	for _, tier := range []string{policy.TierNamespace, policy.TierGVisor} {
		t.Run(tier, func(t *testing.T) {
			cfg := tierConfig(t, tier)
			cfg.StateDir = stateDir(t)
			m := newManager(t, cfg)
			spec := approvalSpec()
			spec.Tier = tier
			info := mustCreate(t, m, "a", CreateRequest{Policy: spec})
			ran := func(m *Manager, marker string) bool {
				out := mustRun(t, m, "a", info.ID, "test -e "+marker+" && echo yes || echo no")
				return strings.TrimSpace(out) == "yes"
			}

			// A command: asked, the other tenant cannot see or answer
			// it, answered once by its tenant.
			done := pushed(m, info.ID, "once")
			q := question(t, m, "a", info.ID)
			if q.Kind != approve.KindCommand || q.Command != "git push" || q.Sandbox != info.ID {
				t.Errorf("the question: %+v", q)
			}
			if list := m.Approvals("b", ""); len(list) != 0 {
				t.Errorf("tenant b lists %+v", list)
			}
			if _, err := m.Approval("b", q.ID); !errors.Is(err, ErrNotFound) {
				t.Errorf("tenant b gets it: %v", err)
			}
			if err := m.AnswerApproval("b", q.ID, approve.AnswerOnce, "api"); !errors.Is(err, ErrNotFound) {
				t.Errorf("tenant b answers it: %v", err)
			}
			if err := m.AnswerApproval("a", q.ID, "sure", "api"); !errors.Is(err, ErrInvalid) {
				t.Errorf("a bad answer: %v", err)
			}
			if err := m.AnswerApproval("a", q.ID, approve.AnswerOnce, "api"); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("answered once: %v", err)
			}
			if !ran(m, "once") {
				t.Error("answered once: it did not run")
			}

			// A host no rule allows: the proxy's hook asks the same
			// broker (what the proxy calls while it holds the
			// connection).
			m.mu.Lock()
			l := m.live[info.ID]
			m.mu.Unlock()
			if l.proxy == nil || l.proxy.Unknown == nil {
				t.Fatal("the proxy has no hook for network.on_unknown: ask")
			}
			held := make(chan error, 1)
			go func() { held <- l.proxy.Unknown(context.Background(), "unknown.test", 443) }()
			q = question(t, m, "a", info.ID)
			if q.Kind != approve.KindNetwork || q.Subject != "unknown.test:443" {
				t.Errorf("the host's question: %+v", q)
			}
			if err := m.AnswerApproval("a", q.ID, approve.AnswerDeny, "api"); err != nil {
				t.Fatal(err)
			}
			if err := <-held; !errors.Is(err, approve.ErrDenied) {
				t.Errorf("the host denied: %v", err)
			}

			// New egress rules keep on_unknown: ask; they may not drop it.
			if nw, err := m.UpdateNetwork(testCtx(t), "a", info.ID, policy.Network{AllowedDomains: []string{"other.test"}}, false); err != nil || nw.OnUnknown != "ask" {
				t.Errorf("new rules: %+v, %v; want on_unknown kept", nw, err)
			}
			if _, err := m.UpdateNetwork(testCtx(t), "a", info.ID, policy.Network{AllowedDomains: []string{"other.test"}, OnUnknown: "deny"}, false); !errors.Is(err, ErrInvalid) {
				t.Errorf("new rules with on_unknown: deny: %v, want invalid", err)
			}

			// A deny rule: refused at once, no question.
			if _, _, err := run(testCtx(t), m, "a", info.ID, "touch ruled; rm -f x"); !errors.Is(err, approve.ErrDenied) {
				t.Errorf("a deny rule: %v", err)
			}
			if ran(m, "ruled") {
				t.Error("a deny rule: it ran")
			}

			// An allowed command with an environment of its own that
			// changes what its name runs (PATH, LD_PRELOAD) is asked
			// about, the assignment shown.
			envDone := make(chan error, 1)
			go func() {
				c, err := m.Agent(context.Background(), "a", info.ID)
				if err == nil {
					var p *agent.Process
					if p, err = c.Exec(context.Background(), agent.ExecRequest{Args: []string{"touch", "/tmp/pathed"}, Env: []string{"PATH=/tmp/evil:/usr/bin:/bin"}}); err == nil {
						_, err = p.Wait()
					}
				}
				envDone <- err
			}()
			q = question(t, m, "a", info.ID)
			if !strings.Contains(q.Subject, "export PATH=") || !strings.Contains(q.Subject, "touch /tmp/pathed") {
				t.Errorf("the question of a command with PATH set: %+v", q)
			}
			if err := m.AnswerApproval("a", q.ID, approve.AnswerDeny, "api"); err != nil {
				t.Fatal(err)
			}
			if err := <-envDone; !errors.Is(err, approve.ErrDenied) {
				t.Errorf("PATH set, denied: %v", err)
			}
			if ran(m, "/tmp/pathed") {
				t.Error("PATH set, denied: it ran")
			}
			if tier != policy.TierGVisor {
				return
			}

			// Paused to disk, the daemon closed, the next one resumes
			// it: its approvals hold as before.
			if _, err := m.Pause(testCtx(t), "a", info.ID); err != nil {
				t.Fatal(err)
			}
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
			m2 := newManager(t, cfg)
			if got, err := m2.Resume(testCtx(t), "a", info.ID); err != nil || got.State != store.StateRunning {
				t.Fatalf("resume: %+v, %v", got, err)
			}
			done = pushed(m2, info.ID, "resumed")
			q = question(t, m2, "a", info.ID)
			if err := m2.AnswerApproval("a", q.ID, approve.AnswerDeny, "api"); err != nil {
				t.Fatal(err)
			}
			if err := <-done; !errors.Is(err, approve.ErrDenied) {
				t.Errorf("after resume, denied: %v", err)
			}
			if ran(m2, "resumed") {
				t.Error("after resume: the denied command ran")
			}
		})
	}
}

// TestApprovalFileRules: a served sandbox's approvals.files hold the
// apply of its review workspace's change set: the apply of a set that
// touches a path an ask rule names waits for the tenant's answer (the
// sandbox has ended; another tenant sees nothing), deny leaves the
// workspace as it was, once applies; a policy with file rules only asks
// about no command.
func TestApprovalFileRules(t *testing.T) {
	host := t.TempDir()
	m := newManager(t, Config{ReviewWorkspaces: map[string]ReviewWorkspace{"app": {Dir: host, Tenants: []string{"a"}}}})
	spec := policy.Spec{Approvals: policy.Approvals{Files: []policy.FileRule{{Action: "ask", Globs: []string{"ci/**"}}}}}
	apply := func(marker string) (bool, error) {
		t.Helper()
		info := mustCreate(t, m, "a", CreateRequest{Policy: spec, ReviewWorkspace: "app"})
		// No command rules: commands run without a question.
		mustRun(t, m, "a", info.ID, "mkdir -p ci && echo x > ci/"+marker)
		if err := m.Destroy(testCtx(t), "a", info.ID); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := m.ApplyChangeSet(context.Background(), "a", info.ChangeSet, nil, changes.ApplyOptions{}, false)
			done <- err
		}()
		q := question(t, m, "a", info.ID)
		if q.Kind != approve.KindFile || !strings.Contains(q.Subject, "ci/"+marker) || !strings.Contains(q.Rule, "ci/**") {
			t.Errorf("the question: %+v", q)
		}
		if list := m.Approvals("b", ""); len(list) != 0 {
			t.Errorf("tenant b lists %+v", list)
		}
		answer := approve.AnswerDeny
		if marker == "once" {
			answer = approve.AnswerOnce
		}
		if err := m.AnswerApproval("a", q.ID, answer, "api"); err != nil {
			t.Fatal(err)
		}
		err := <-done
		_, statErr := os.Stat(filepath.Join(host, "ci", marker))
		return statErr == nil, err
	}
	if applied, err := apply("denied"); err == nil || applied {
		t.Errorf("denied: %v, applied %v", err, applied)
	}
	if applied, err := apply("once"); err != nil || !applied {
		t.Errorf("answered once: %v, applied %v", err, applied)
	}
}

// TestApprovalUnknownHost, under each tier: with network.on_unknown: ask,
// the sandbox's egress proxy holds a connection to a host no rule allows
// until its tenant answers: once, and the request reaches the upstream;
// deny, and it is refused (403) without reaching it.
func TestApprovalUnknownHost(t *testing.T) {
	for _, tier := range []string{policy.TierNamespace, policy.TierGVisor} {
		t.Run(tier, func(t *testing.T) {
			m, port := upstreamManager(t, tier)
			info := mustCreate(t, m, "a", CreateRequest{Policy: policy.Spec{Tier: tier, Network: policy.Network{
				AllowedDomains: []string{"allowed.test"},
				Hosts:          []string{"up.test:127.0.0.1"},
				OnUnknown:      "ask",
			}}})
			fetch := func(path string) <-chan string {
				ch := make(chan string, 1)
				go func() {
					out, _, err := run(context.Background(), m, "a", info.ID, `curl -sS --max-time 120 -w " %{http_code}\n" http://up.test:`+port+path)
					if err != nil {
						out = err.Error()
					}
					ch <- out
				}()
				return ch
			}
			for _, answer := range []approve.Answer{approve.AnswerOnce, approve.AnswerDeny} {
				done := fetch("/" + string(answer))
				q := question(t, m, "a", info.ID)
				if q.Kind != approve.KindNetwork || q.Subject != "up.test:"+port {
					t.Errorf("the question: %+v", q)
				}
				if err := m.AnswerApproval("a", q.ID, answer, "api"); err != nil {
					t.Fatal(err)
				}
				out := <-done
				reached := strings.Contains(out, "upstream saw up.test:"+port+"/"+string(answer))
				if reached != answer.Allows() || (!reached && !strings.Contains(out, "403")) {
					t.Errorf("answered %s: %q", answer, out)
				}
			}
		})
	}
}
