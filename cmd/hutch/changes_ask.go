package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/hutch-sandbox/hutch/internal/approve"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// noApplyAsker is why hutch changes apply refuses what a file rule asks
// when it cannot ask, and how to allow it.
const noApplyAsker = "no terminal to ask on: apply them with --yes-files, or remove the rule from the policy"

// applyGate is the gate of hutch changes apply's file questions
// (approvals.files ask): --yes-files answers them yes; else the person at
// hutch's controlling terminal is asked; without one, ask is refused,
// saying how to allow it. close releases the terminal.
func applyGate(yes bool) (g *approve.Gate, close func()) {
	g = &approve.Gate{NoAsker: noApplyAsker}
	if yes {
		g.Asker = approve.AskerFunc(func(context.Context, approve.Request) approve.Reply {
			return approve.Reply{Answer: approve.AnswerOnce, By: "--yes-files"}
		})
		return g, func() {}
	}
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return g, func() {}
	}
	if !sandbox.IsTerminal(tty) {
		tty.Close()
		return g, func() {}
	}
	g.Asker = lineAsker{tty: tty}
	return g, func() { tty.Close() }
}

// lineAsker asks on a terminal in its line mode: the question, then a
// line that answers it, "y" or "yes" for allow (this apply), anything else
// for deny.
type lineAsker struct{ tty *os.File }

// Ask implements approve.Asker.
func (a lineAsker) Ask(ctx context.Context, r approve.Request) approve.Reply {
	var b strings.Builder
	b.WriteString("\nhutch: approval needed to apply changes to these paths:\n")
	for _, p := range strings.Split(r.Subject, "\n") {
		fmt.Fprintf(&b, "    %s\n", shownPath(p))
	}
	fmt.Fprintf(&b, "  asked by %s\n  apply them? [y/N] ", shownPath(r.Rule))
	if _, err := a.tty.WriteString(b.String()); err != nil {
		return approve.Reply{Answer: approve.AnswerDeny, By: "nobody", Note: err.Error()}
	}
	if d, ok := ctx.Deadline(); ok {
		_ = a.tty.SetReadDeadline(d)
		defer a.tty.SetReadDeadline(time.Time{})
	}
	line, err := bufio.NewReader(a.tty).ReadString('\n')
	if err != nil {
		_, _ = a.tty.WriteString("\nhutch: no answer: denied\n")
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return approve.Reply{Answer: approve.AnswerDeny, By: "timeout"}
		}
		return approve.Reply{Answer: approve.AnswerDeny, By: "nobody", Note: err.Error()}
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return approve.Reply{Answer: approve.AnswerOnce, By: "terminal"}
	}
	return approve.Reply{Answer: approve.AnswerDeny, By: "terminal"}
}

// shownPath is a path the sandbox named, quoted when it holds characters
// that a terminal would act on.
func shownPath(p string) string {
	if strings.ContainsFunc(p, func(r rune) bool { return !unicode.IsGraphic(r) }) {
		return fmt.Sprintf("%q", p)
	}
	return p
}
