package approve

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

func testGate(t *testing.T, answers ...Answer) (*Gate, *[]Request, *[]Record) {
	t.Helper()
	set, err := NewSet(Ask, []Rule{
		{Action: Allow, Pattern: []string{"ls"}},
		{Action: Deny, Pattern: []string{"rm", "-rf", "/"}},
		{Action: Ask, Pattern: []string{"git", "push"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var asked []Request
	var recs []Record
	g := &Gate{Commands: set, OnUnknown: Ask, Record: func(r Record) { mu.Lock(); recs = append(recs, r); mu.Unlock() }}
	g.Asker = AskerFunc(func(ctx context.Context, r Request) Reply {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, r)
		if len(answers) == 0 {
			<-ctx.Done()
			return Reply{Answer: AnswerDeny}
		}
		a := answers[0]
		answers = answers[1:]
		return Reply{Answer: a, By: "test"}
	})
	return g, &asked, &recs
}

func TestGateCommands(t *testing.T) {
	ctx := context.Background()
	t.Run("allow and deny rules ask no one", func(t *testing.T) {
		g, asked, recs := testGate(t)
		if err := g.Command(ctx, "ls -l"); err != nil {
			t.Errorf("ls: %v", err)
		}
		err := g.Command(ctx, "ls && rm -rf /")
		var d *Denied
		if !errors.As(err, &d) || !errors.Is(err, ErrDenied) || d.Record.By != "rule" {
			t.Errorf("rm -rf /: %v", err)
		}
		if len(*asked) != 0 {
			t.Errorf("asked %v", *asked)
		}
		if len(*recs) != 2 || (*recs)[0].Decision != "allow" || (*recs)[1].Decision != "deny" {
			t.Errorf("records %+v", *recs)
		}
	})
	t.Run("once asks again next time", func(t *testing.T) {
		g, asked, _ := testGate(t, AnswerOnce, AnswerDeny)
		if err := g.Command(ctx, "git push origin main"); err != nil {
			t.Fatal(err)
		}
		if err := g.Command(ctx, "git push origin main"); !errors.Is(err, ErrDenied) {
			t.Errorf("second run: %v", err)
		}
		if len(*asked) != 2 || (*asked)[0].Command != "git push origin main" || !strings.Contains((*asked)[0].Rule, "[git, push]") {
			t.Errorf("asked %+v", *asked)
		}
	})
	t.Run("run remembers the command for the run", func(t *testing.T) {
		g, asked, _ := testGate(t, AnswerRun, AnswerDeny)
		for range 3 {
			if err := g.Command(ctx, "git push origin main"); err != nil {
				t.Fatal(err)
			}
		}
		if err := g.Command(ctx, "git push origin other"); !errors.Is(err, ErrDenied) {
			t.Errorf("another push: %v", err)
		}
		if len(*asked) != 2 {
			t.Errorf("asked %d times", len(*asked))
		}
	})
	t.Run("every asking command of a line is asked about", func(t *testing.T) {
		g, asked, _ := testGate(t, AnswerOnce, AnswerOnce)
		if err := g.Command(ctx, "git push a; git push b"); err != nil {
			t.Fatal(err)
		}
		if len(*asked) != 2 || (*asked)[0].Command == (*asked)[1].Command {
			t.Errorf("asked %+v", *asked)
		}
	})
	t.Run("always writes back", func(t *testing.T) {
		g, _, _ := testGate(t, AnswerAlways)
		var wrote []string
		g.Always = func(r Request) error { wrote = append(wrote, r.Command); return nil }
		if err := g.Command(ctx, "git push x"); err != nil {
			t.Fatal(err)
		}
		if err := g.Command(ctx, "git push x"); err != nil {
			t.Fatal(err)
		}
		if len(wrote) != 1 || wrote[0] != "git push x" {
			t.Errorf("wrote %q", wrote)
		}
	})
	t.Run("timeout is a refusal", func(t *testing.T) {
		g, _, recs := testGate(t)
		g.Timeout = 20 * time.Millisecond
		err := g.Command(ctx, "git push")
		var d *Denied
		if !errors.As(err, &d) || d.Record.By != "timeout" || !strings.Contains(err.Error(), "no answer in time") {
			t.Errorf("err %v", err)
		}
		if r := (*recs)[len(*recs)-1]; r.By != "timeout" || r.Decision != "deny" {
			t.Errorf("record %+v", r)
		}
	})
	t.Run("no one to ask", func(t *testing.T) {
		g, _, _ := testGate(t)
		g.Asker, g.NoAsker = nil, "no terminal to ask on"
		err := g.Command(ctx, "git push")
		if err == nil || !strings.Contains(err.Error(), "no terminal to ask on") || !strings.Contains(err.Error(), "approvals.approved") {
			t.Errorf("err %v", err)
		}
	})
}

func TestGateHosts(t *testing.T) {
	ctx := context.Background()
	g, asked, _ := testGate(t, AnswerRun, AnswerDeny)
	if err := g.Host(ctx, "a.test", 443); err != nil {
		t.Fatal(err)
	}
	if err := g.Host(ctx, "a.test", 443); err != nil {
		t.Fatal(err)
	}
	if err := g.Host(ctx, "::1", 80); !errors.Is(err, ErrDenied) {
		t.Errorf("::1: %v", err)
	}
	if len(*asked) != 2 || (*asked)[0].Subject != "a.test:443" || (*asked)[1].Subject != "[::1]:80" {
		t.Errorf("asked %+v", *asked)
	}
	g.OnUnknown = Deny
	if err := g.Host(ctx, "b.test", 443); !errors.Is(err, ErrDenied) || len(*asked) != 2 {
		t.Errorf("on_unknown deny: %v, asked %d", err, len(*asked))
	}
}

func TestBroker(t *testing.T) {
	var mu sync.Mutex
	var events []string
	b := &Broker{Notify: func(p Pending, r *Reply) {
		mu.Lock()
		defer mu.Unlock()
		if r == nil {
			events = append(events, "asked "+p.Subject)
		} else {
			events = append(events, "answered "+p.Subject+" "+string(r.Answer)+" by "+r.By)
		}
	}}
	g := &Gate{Commands: nil, OnUnknown: Ask, Asker: b, Sandbox: "sb1"}
	done := make(chan error, 1)
	go func() { done <- g.Host(context.Background(), "a.test", 443) }()
	var p []Pending
	for len(p) == 0 {
		time.Sleep(5 * time.Millisecond)
		p = b.List(nil)
	}
	if p[0].Subject != "a.test:443" || p[0].Sandbox != "sb1" || p[0].Kind != KindNetwork || !p[0].Expires.After(p[0].Created) {
		t.Errorf("pending %+v", p[0])
	}
	if err := b.Answer(p[0].ID, "maybe", "api"); err == nil {
		t.Error("answer maybe accepted")
	}
	if err := b.Answer(p[0].ID, AnswerRun, "api"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := b.Answer(p[0].ID, AnswerDeny, "api"); !errors.Is(err, ErrNotPending) {
		t.Errorf("second answer: %v", err)
	}
	if len(b.List(nil)) != 0 {
		t.Error("answered question still listed")
	}
	mu.Lock()
	if len(events) != 2 || events[1] != "answered a.test:443 run by api" {
		t.Errorf("events %q", events)
	}
	mu.Unlock()

	// Expiry refuses, and the context's own asker can answer first.
	g.Timeout = 50 * time.Millisecond
	if err := g.Host(context.Background(), "b.test", 443); !errors.Is(err, ErrDenied) {
		t.Errorf("expired: %v", err)
	}
	g.Timeout = time.Hour
	ctx := WithAsker(context.Background(), AskerFunc(func(ctx context.Context, r Request) Reply {
		return Reply{Answer: AnswerOnce, By: "mcp"}
	}))
	if err := g.Host(ctx, "c.test", 443); err != nil {
		t.Errorf("elicited: %v", err)
	}
}

func TestExportRisky(t *testing.T) {
	s, err := NewSet(Ask, []Rule{{Action: Allow, Pattern: []string{"git", "status"}}})
	if err != nil {
		t.Fatal(err)
	}
	line, env := ExportRisky("git status", []string{"HOME=/root", "LANG=C"})
	if line != "git status" || len(env) != 2 {
		t.Errorf("harmless variables: %q %q", line, env)
	}
	if d := s.Decide(line); d.Action != Allow {
		t.Errorf("git status with LANG: %v", d)
	}
	line, env = ExportRisky("git status", []string{"PATH=/tmp/evil dir", "LANG=C", "LD_PRELOAD=/x.so"})
	if line != "export PATH='/tmp/evil dir'\nexport LD_PRELOAD=/x.so\ngit status" || len(env) != 1 || env[0] != "LANG=C" {
		t.Errorf("risky variables: %q %q", line, env)
	}
	if d := s.Decide(line); d.Action != Ask {
		t.Errorf("git status with PATH set: %v, want ask", d)
	}
}
