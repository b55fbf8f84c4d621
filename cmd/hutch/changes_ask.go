package main

import (
	"context"

	"github.com/hutch-sandbox/hutch/internal/approve"
	"github.com/hutch-sandbox/hutch/internal/runner"
)

// noApplyAsker is why hutch changes apply refuses what a file rule asks
// when it cannot ask, and how to allow it.
const noApplyAsker = "no terminal to ask on: apply them with --yes-files, or remove the rule from the policy"

// applyGate is the gate of hutch changes apply's file questions
// (approvals.files ask): --yes-files answers them yes; else the person at
// hutch's controlling terminal is asked (runner.TerminalAsker: "apply
// them? [y/N]"); without one, ask is refused,
// saying how to allow it. close releases the terminal.
func applyGate(yes bool) (g *approve.Gate, close func()) {
	g = &approve.Gate{NoAsker: noApplyAsker}
	if yes {
		g.Asker = approve.AskerFunc(func(context.Context, approve.Request) approve.Reply {
			return approve.Reply{Answer: approve.AnswerOnce, By: "--yes-files"}
		})
		return g, func() {}
	}
	tty, err := runner.OpenTerminalAsker("")
	if err != nil {
		return g, func() {}
	}
	g.Asker = tty
	return g, func() { tty.Close() }
}
