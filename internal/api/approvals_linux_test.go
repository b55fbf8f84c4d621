package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// approvalPolicy asks about git push and denies rm; every other command
// runs.
const approvalPolicy = `{"approvals": {"preset": "full", "commands": [{"ask": ["git", "push"]}, {"deny": ["rm"]}]}}`

// marked is a command line that writes the marker file name in the
// workspace, then pushes: it asks as a whole, so the marker says whether
// the line ran at all.
func marked(name string) []string {
	return []string{"/bin/sh", "-c", "touch " + name + "; git push"}
}

// exists reports whether the workspace of sandbox id holds name.
func exists(ctx context.Context, t *testing.T, c *client.Client, id, name string) bool {
	t.Helper()
	res, err := c.Run(ctx, id, client.Command{Args: []string{"/bin/sh", "-c", "test -e " + name + " && echo yes || echo no"}})
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(res.Stdout)) == "yes"
}

// waitQuestion waits for the one question of sandbox id, as c sees it.
func waitQuestion(ctx context.Context, t *testing.T, c *client.Client, id string) client.Approval {
	t.Helper()
	var list []client.Approval
	testutil.Eventually(time.Minute, func() bool {
		var err error
		if list, err = c.Approvals(ctx, id); err != nil {
			t.Fatal(err)
		}
		return len(list) > 0
	})
	if len(list) != 1 {
		t.Fatalf("approvals of %s: %+v, want one", id, list)
	}
	return list[0]
}

type runResult struct {
	res *client.Result
	err error
}

// runAsync runs cmd in sandbox id; its result arrives on the channel.
func runAsync(ctx context.Context, c *client.Client, id string, cmd []string) <-chan runResult {
	ch := make(chan runResult, 1)
	go func() {
		res, err := c.Run(ctx, id, client.Command{Args: cmd})
		ch <- runResult{res, err}
	}()
	return ch
}

// TestServedApprovals: against a real daemon, through the SDK, a sandbox
// whose policy asks about git push holds such a command until it is
// answered: it shows in GET /v1/approvals (its tenant's only: another
// tenant neither lists nor gets nor answers it), "once" lets it run,
// "deny" refuses it with 403 not_approved and it never runs (its marker
// file is not written); a deny rule refuses without a question. The
// events tell of the questions, and the audit log keeps every decision.
func TestServedApprovals(t *testing.T) {
	al, auditPath := openAudit(t)
	_, op, sock := realDaemon(t, daemon.Config{Audit: al}, Config{Audit: al})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	tenant := func(name string) *client.Client {
		tok, err := op.CreateToken(ctx, client.TokenOptions{Tenant: name})
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.New("unix://"+sock, tok)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c, other := tenant("alice"), tenant("mallory")

	sb, err := c.Create(ctx, client.CreateOptions{Policy: json.RawMessage(approvalPolicy)})
	if err != nil {
		t.Fatal(err)
	}

	// Allowed by the preset: runs at once, nothing asked.
	if res, err := c.Run(ctx, sb.ID, client.Command{Args: []string{"echo", "ok"}}); err != nil || string(res.Stdout) != "ok\n" {
		t.Fatalf("echo: %+v, %v", res, err)
	}

	// Asked, answered once: it runs.
	done := runAsync(ctx, c, sb.ID, marked("once"))
	q := waitQuestion(ctx, t, c, sb.ID)
	if q.Kind != "command" || q.Sandbox != sb.ID || q.Command != "git push" || !strings.Contains(q.Subject, "touch once; git push") || q.Rule == "" || !q.Expires.After(q.Created) {
		t.Errorf("the question: %+v", q)
	}
	if got, err := c.Approval(ctx, q.ID); err != nil || got.ID != q.ID {
		t.Errorf("get %s: %+v, %v", q.ID, got, err)
	}
	// Another tenant sees none of it, and cannot answer it.
	if list, err := other.Approvals(ctx, ""); err != nil || len(list) != 0 {
		t.Errorf("another tenant's list: %+v, %v", list, err)
	}
	if list, err := other.Approvals(ctx, sb.ID); err != nil || len(list) != 0 {
		t.Errorf("another tenant's list of the sandbox: %+v, %v", list, err)
	}
	if _, err := other.Approval(ctx, q.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("another tenant's get: %v, want not found", err)
	}
	if err := other.Answer(ctx, q.ID, client.AnswerOnce); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("another tenant's answer: %v, want not found", err)
	}
	// A bad answer is a 400, and answers nothing.
	var e *client.Error
	if err := c.Answer(ctx, q.ID, "maybe"); !errors.As(err, &e) || e.Status != http.StatusBadRequest {
		t.Errorf("answer maybe: %v, want 400", err)
	}
	select {
	case r := <-done:
		t.Fatalf("the command ended before any answer: %+v, %v", r.res, r.err)
	default:
	}
	if err := c.Answer(ctx, q.ID, client.AnswerOnce); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil {
		t.Fatalf("answered once: %v", r.err)
	}
	if !exists(ctx, t, c, sb.ID, "once") {
		t.Error("answered once: the command did not run")
	}
	if err := c.Answer(ctx, q.ID, client.AnswerOnce); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("a second answer: %v, want not found", err)
	}

	// Asked, denied: 403 not_approved, and it never ran.
	done = runAsync(ctx, c, sb.ID, marked("denied"))
	q = waitQuestion(ctx, t, c, sb.ID)
	if err := c.Answer(ctx, q.ID, client.AnswerDeny); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if !errors.As(r.err, &e) || e.Status != http.StatusForbidden || e.Code != client.CodeNotApproved || !errors.Is(r.err, client.ErrNotApproved) ||
		!strings.Contains(e.Message, "git push") {
		t.Errorf("denied: %+v, %v; want 403 not_approved naming git push", r.res, r.err)
	}
	if exists(ctx, t, c, sb.ID, "denied") {
		t.Error("denied: the command ran")
	}

	// A deny rule: refused at once, nobody asked.
	_, err = c.Run(ctx, sb.ID, client.Command{Args: []string{"/bin/sh", "-c", "touch ruled; rm -f x"}})
	if !errors.As(err, &e) || e.Status != http.StatusForbidden || e.Code != client.CodeNotApproved || !strings.Contains(e.Message, "rm") {
		t.Errorf("deny rule: %v, want 403 not_approved", err)
	}
	if exists(ctx, t, c, sb.ID, "ruled") {
		t.Error("deny rule: the command ran")
	}

	// Answered "run": the same command runs on without a question for
	// the rest of the sandbox's life.
	done = runAsync(ctx, c, sb.ID, marked("run1"))
	q = waitQuestion(ctx, t, c, sb.ID)
	if err := c.Answer(ctx, q.ID, client.AnswerRun); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil {
		t.Fatalf("answered run: %v", r.err)
	}
	if _, err := c.Run(ctx, sb.ID, client.Command{Args: marked("run2")}); err != nil {
		t.Errorf("after run: %v", err)
	}
	if !exists(ctx, t, c, sb.ID, "run1") || !exists(ctx, t, c, sb.ID, "run2") {
		t.Error("answered run: the commands did not run")
	}

	// The events: each question asked and answered, the deny rule's
	// refusal.
	var types []string
	answers := map[string]bool{}
	ectx, ecancel := context.WithTimeout(ctx, 30*time.Second)
	defer ecancel()
	for ev, err := range c.Events(ectx, sb.ID, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(ev.Type, "approval.") {
			types = append(types, ev.Type)
			if ev.Type == daemon.EventApprovalAnswered {
				a, _ := ev.Data["answer"].(string)
				by, _ := ev.Data["by"].(string)
				answers[a+"/"+by] = true
			}
		}
		if ev.Type == daemon.EventExec {
			if args, _ := ev.Data["args"].([]any); len(args) == 3 && args[2] == "touch run2; git push" {
				break
			}
		}
	}
	for _, want := range []string{daemon.EventApprovalRequested, daemon.EventApprovalAnswered, daemon.EventApprovalDenied} {
		if !slices.Contains(types, want) {
			t.Errorf("events %v lack %s", types, want)
		}
	}
	if !answers["once/api"] || !answers["deny/api"] || !answers["run/api"] {
		t.Errorf("answered events: %v", answers)
	}

	// The audit log: the decisions, by whom.
	var decisions []string
	for _, en := range readAudit(t, auditPath) {
		if en.Action == "approval" && en.Approval != nil {
			if en.Sandbox != sb.ID || en.Tenant != "alice" {
				t.Errorf("audit entry %+v: not of alice's %s", en, sb.ID)
			}
			decisions = append(decisions, en.Approval.Decision+"/"+en.Approval.By+"/"+string(en.Approval.Answer))
		}
	}
	for _, want := range []string{"allow/rule/", "allow/api/once", "deny/api/deny", "deny/rule/", "allow/api/run"} {
		if !slices.Contains(decisions, want) {
			t.Errorf("audit decisions %v lack %s", decisions, want)
		}
	}
}

// TestServedApprovalExpires: a question no one answers expires (hutch
// serve --approval-timeout) as a refusal, and the command never runs.
func TestServedApprovalExpires(t *testing.T) {
	_, c, _ := realDaemon(t, daemon.Config{ApprovalTimeout: 300 * time.Millisecond}, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := c.Create(ctx, client.CreateOptions{Policy: json.RawMessage(approvalPolicy)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Run(ctx, sb.ID, client.Command{Args: marked("expired")})
	var e *client.Error
	if !errors.As(err, &e) || e.Code != client.CodeNotApproved || !strings.Contains(e.Message, "no answer in time") {
		t.Errorf("unanswered: %v, want not_approved: no answer in time", err)
	}
	if exists(ctx, t, c, sb.ID, "expired") {
		t.Error("unanswered: the command ran")
	}
	if list, err := c.Approvals(ctx, ""); err != nil || len(list) != 0 {
		t.Errorf("after the expiry: %+v, %v", list, err)
	}
}
