package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/approve"
	"github.com/hutch-sandbox/hutch/internal/runner"
)

// awaitApprovals watches, while hutch exec's command waits to start in
// sandbox id, for the questions the sandbox's approvals put about it: on
// a terminal hutch asks there and answers through the API (the caller is
// the tenant who may answer); without one it says on stderr how to
// answer. stop ends the watch and any question still shown.
func awaitApprovals(c *client.Client, id string, command []string, env map[string]string, stderr io.Writer) (stop func()) {
	vars := make([]string, 0, len(env))
	for k, v := range env {
		vars = append(vars, k+"="+v)
	}
	line, _ := approve.ExportRisky(approve.Line(command), vars)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		watchApprovals(ctx, c, id, line, stderr)
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}

// ours says whether question a is about line, an exec's command in
// sandbox id (a question's subject is cut after 200 bytes).
func ours(a client.Approval, id, line string) bool {
	if a.Sandbox != id || a.Kind != "command" {
		return false
	}
	subj := strings.TrimSuffix(a.Subject, "…")
	return subj == line || strings.HasSuffix(subj, "\n"+line) || len(subj) >= 200
}

func watchApprovals(ctx context.Context, c *client.Client, id, line string, stderr io.Writer) {
	var (
		tty    *runner.TerminalAsker
		noTTY  bool
		shown  = map[string]context.CancelFunc{}
		asking sync.WaitGroup
	)
	defer func() {
		for _, cancel := range shown {
			cancel()
		}
		asking.Wait()
		if tty != nil {
			tty.Close()
		}
	}()
	tick := time.NewTimer(300 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		tick.Reset(time.Second)
		lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
		list, err := c.Approvals(lctx, id)
		lcancel()
		if err != nil {
			continue
		}
		waiting := map[string]bool{}
		for _, a := range list {
			if !ours(a, id, line) {
				continue
			}
			waiting[a.ID] = true
			if shown[a.ID] != nil {
				continue
			}
			if tty == nil && !noTTY {
				var err error
				if tty, err = runner.OpenTerminalAsker(""); err != nil {
					noTTY = true
				}
			}
			qctx, qcancel := context.WithDeadline(ctx, a.Expires)
			shown[a.ID] = qcancel
			if tty == nil {
				fmt.Fprintf(stderr, "hutch: waiting for approval %s (%s): %s\nhutch: answer with: hutch approvals answer %s once|run|deny (denied at %s without an answer)\n",
					a.ID, describeAsk(a), a.Command, a.ID, a.Expires.Local().Format(time.TimeOnly))
				continue
			}
			asking.Add(1)
			go func(a client.Approval) {
				defer asking.Done()
				reply := tty.Ask(qctx, approve.Request{Kind: approve.KindCommand, Subject: a.Subject, Command: a.Command, Rule: a.Rule, Reason: a.Reason, Sandbox: a.Sandbox})
				if reply.By != "terminal" {
					return
				}
				actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer acancel()
				if err := c.Answer(actx, a.ID, string(reply.Answer)); err != nil {
					fmt.Fprintf(stderr, "hutch: answering %s: %v\n", a.ID, err)
				}
			}(a)
		}
		// A question answered elsewhere, or expired, is no longer asked.
		for qid, cancel := range shown {
			if !waiting[qid] {
				cancel()
			}
		}
	}
}

// describeAsk is the rule that asked, or the reason.
func describeAsk(a client.Approval) string {
	if a.Rule != "" {
		return "asked by " + a.Rule
	}
	return a.Reason
}
