package approve

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Kind says what an approval is about.
type Kind string

// The kinds of approvals.
const (
	// KindCommand is a command line about to run.
	KindCommand Kind = "command"
	// KindNetwork is a host no network rule allows ("host:port").
	KindNetwork Kind = "network"
	// KindFile is a change set about to be applied that touches paths a
	// file rule names.
	KindFile Kind = "file"
)

// Request is one question for a person.
type Request struct {
	Kind Kind `json:"kind"`
	// Subject is what is asked about: the whole command line, "host:port",
	// or the paths of a change set, one per line.
	Subject string `json:"subject"`
	// Command is the simple command of a command line that asked, as
	// Decision.Command shows it: what "allow for this run" and "allow
	// always" remember. Empty for other kinds.
	Command string `json:"command,omitempty"`
	// Rule is the rule that asked and where it is written ("" when the
	// default or an unknown shape did).
	Rule string `json:"rule,omitempty"`
	// Reason says why, in words.
	Reason string `json:"reason"`
	// Sandbox is the sandbox's id, where there is one.
	Sandbox string `json:"sandbox,omitempty"`
}

// Answer is a person's answer.
type Answer string

// The answers.
const (
	// AnswerOnce allows this one time.
	AnswerOnce Answer = "once"
	// AnswerRun allows the same command or host for the rest of the run
	// (the sandbox's life).
	AnswerRun Answer = "run"
	// AnswerAlways allows it from now on: hutch writes it back to the
	// policy file where it can, else it lasts for the run.
	AnswerAlways Answer = "always"
	// AnswerDeny refuses.
	AnswerDeny Answer = "deny"
)

// ParseAnswer reads an answer's name.
func ParseAnswer(s string) (Answer, error) {
	switch a := Answer(strings.ToLower(strings.TrimSpace(s))); a {
	case AnswerOnce, AnswerRun, AnswerAlways, AnswerDeny:
		return a, nil
	}
	return "", fmt.Errorf("unknown answer %q: want once, run, always or deny", s)
}

// Allows says whether the answer lets the action go ahead.
func (a Answer) Allows() bool { return a == AnswerOnce || a == AnswerRun || a == AnswerAlways }

// Reply is how a question was answered.
type Reply struct {
	Answer Answer `json:"answer"`
	// By says who answered: "terminal", "api", "mcp", … or, for a
	// refusal no person made, "timeout" or "nobody".
	By string `json:"by"`
	// Note is a message for the refused side (why, how to allow).
	Note string `json:"note,omitempty"`
}

// Asker asks a person. Ask returns when they answer or ctx ends; an
// ended ctx is a refusal By "timeout" (or whatever the Asker reports).
type Asker interface {
	Ask(ctx context.Context, r Request) Reply
}

// AskerFunc adapts a function to Asker.
type AskerFunc func(ctx context.Context, r Request) Reply

// Ask calls f.
func (f AskerFunc) Ask(ctx context.Context, r Request) Reply { return f(ctx, r) }

// Record is what the report and the audit log keep of one decision.
type Record struct {
	Time    time.Time `json:"time"`
	Kind    Kind      `json:"kind"`
	Subject string    `json:"subject"`
	// Command is the simple command that decided, for a command line.
	Command string `json:"command,omitempty"`
	// Decision is "allow" or "deny".
	Decision string `json:"decision"`
	// Rule is the rule that decided or asked, and where it is written.
	Rule string `json:"rule,omitempty"`
	// By is "rule" when no one was asked, else Reply.By.
	By string `json:"by"`
	// Answer is the person's answer, when one was asked.
	Answer Answer `json:"answer,omitempty"`
	// TookMS is how long the question waited, in milliseconds.
	TookMS int64  `json:"took_ms,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// DefaultTimeout is how long a question waits for its answer.
const DefaultTimeout = 2 * time.Minute

// ErrDenied is the error of a refused action; Denied says more.
var ErrDenied = errors.New("not approved")

// Denied is a refusal: what, by which rule, and how to allow it.
type Denied struct {
	Record Record
	// Hint says how to allow it, in the words of the policy file.
	Hint string
}

func (d *Denied) Error() string {
	var b strings.Builder
	what := "command"
	if d.Record.Kind != KindCommand {
		what = string(d.Record.Kind)
	}
	fmt.Fprintf(&b, "%s not approved: %s", what, d.Record.Subject)
	if d.Record.Command != "" && d.Record.Command != d.Record.Subject {
		fmt.Fprintf(&b, " (on %s)", d.Record.Command)
	}
	if d.Record.Reason != "" {
		fmt.Fprintf(&b, ": %s", d.Record.Reason)
	}
	if d.Hint != "" {
		fmt.Fprintf(&b, "; %s", d.Hint)
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrDenied) hold.
func (d *Denied) Unwrap() error { return ErrDenied }

// Gate applies approval rules and asks a person where they say ask. A
// Gate's fields are set before its first use; its methods are safe for
// concurrent use.
type Gate struct {
	// Commands decides command lines; nil allows every command.
	Commands *Set
	// OnUnknown is what a host no network rule allows gets: Ask, or Deny
	// (the zero value Allow is taken as Deny: the proxy refuses as it
	// always did).
	OnUnknown Action
	// Asker asks; nil means no one can be asked, and ask is deny.
	Asker Asker
	// NoAsker explains, in a refusal's hint, why no one was asked
	// ("no terminal to ask on").
	NoAsker string
	// Timeout bounds each question; 0 is DefaultTimeout.
	Timeout time.Duration
	// Always writes an "allow always" answer back (to the policy file);
	// nil or an error keeps it for the run only (the error is recorded).
	Always func(Request) error
	// Record receives every decision; nil drops them.
	Record func(Record)
	// Sandbox is put in every Request.
	Sandbox string

	mu     sync.Mutex
	grants map[string]bool // kind + "\x00" + what, for the run
}

func grantKey(k Kind, what string) string { return string(k) + "\x00" + what }

func (g *Gate) granted(k Kind, what string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.grants[grantKey(k, what)]
}

func (g *Gate) grant(k Kind, what string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.grants == nil {
		g.grants = map[string]bool{}
	}
	g.grants[grantKey(k, what)] = true
}

// Asks says whether the gate can ever hold anything: command rules or
// network.on_unknown: ask.
func (g *Gate) Asks() bool { return g != nil && (g.Commands != nil || g.OnUnknown == Ask) }

// Command decides whether line may run, asking where a rule says ask:
// nil, or a *Denied (errors.Is ErrDenied) that says why. Every simple
// command of line that asks is asked about in turn, until all are allowed
// or one is refused.
func (g *Gate) Command(ctx context.Context, line string) error {
	if g == nil || g.Commands == nil {
		return nil
	}
	once := map[string]bool{}
	granted := func(cmd string) bool { return once[cmd] || g.granted(KindCommand, cmd) }
	for range MaxCommands + 1 {
		d := g.Commands.DecideGranted(line, granted)
		reason := d.Reason
		if d.Source != "" {
			reason += " (" + d.Source + ")"
		}
		rec := Record{Time: time.Now(), Kind: KindCommand, Subject: truncate(line), Command: d.Command, Rule: ruleText(d), By: "rule", Reason: reason}
		switch d.Action {
		case Allow:
			rec.Decision = "allow"
			g.record(rec)
			return nil
		case Deny:
			rec.Decision = "deny"
			g.record(rec)
			return &Denied{Record: rec, Hint: "a deny rule cannot be answered; change the rule to allow it"}
		}
		req := Request{Kind: KindCommand, Subject: truncate(line), Command: d.Command, Rule: rec.Rule, Reason: reason, Sandbox: g.Sandbox}
		if err := g.put(ctx, req, rec, d.Command, fmt.Sprintf("approvals.approved: [%q] in the policy allows it", d.Command)); err != nil {
			return err
		}
		once[d.Command] = true
	}
	return &Denied{Record: Record{Kind: KindCommand, Subject: truncate(line), Reason: "too many questions"}}
}

// Host decides whether the sandbox may reach host:port, which no network
// rule allows: nil when a person allowed it, else a *Denied.
func (g *Gate) Host(ctx context.Context, host string, port int) error {
	hp := fmt.Sprintf("%s:%d", host, port)
	if strings.Contains(host, ":") {
		hp = fmt.Sprintf("[%s]:%d", host, port)
	}
	rec := Record{Time: time.Now(), Kind: KindNetwork, Subject: hp, By: "rule", Reason: "no network rule allows it"}
	if g == nil || g.OnUnknown != Ask {
		rec.Decision = "deny"
		g.record(rec)
		return &Denied{Record: rec}
	}
	if g.granted(KindNetwork, hp) {
		rec.Decision, rec.By, rec.Reason = "allow", "rule", "allowed for this run"
		g.record(rec)
		return nil
	}
	req := Request{Kind: KindNetwork, Subject: hp, Rule: "network.on_unknown: ask", Reason: rec.Reason, Sandbox: g.Sandbox}
	rec.Rule = req.Rule
	return g.put(ctx, req, rec, hp, "")
}

// Files decides whether a change set touching paths may be applied, where
// a file rule said ask (rule names it): nil or a *Denied.
func (g *Gate) Files(ctx context.Context, paths []string, rule, reason string) error {
	subject := truncate(strings.Join(paths, "\n"))
	rec := Record{Time: time.Now(), Kind: KindFile, Subject: subject, Rule: rule, By: "rule", Reason: reason}
	req := Request{Kind: KindFile, Subject: subject, Rule: rule, Reason: reason, Sandbox: g.Sandbox}
	return g.put(ctx, req, rec, "", "")
}

// put asks req, records the decision (rec filled with the answer) and
// remembers a "run" or "always" answer for what (nothing when ""): nil
// when the answer allows, else a *Denied whose hint adds policyWay.
func (g *Gate) put(ctx context.Context, req Request, rec Record, what, policyWay string) error {
	reply, took := g.ask(ctx, req)
	rec.By, rec.Answer, rec.TookMS = reply.By, reply.Answer, took.Milliseconds()
	if !reply.Answer.Allows() {
		rec.Decision = "deny"
		g.record(rec)
		return &Denied{Record: rec, Hint: g.hint(reply, policyWay)}
	}
	rec.Decision = "allow"
	g.record(rec)
	g.remember(req.Kind, what, req, reply)
	return nil
}

func ruleText(d Decision) string {
	if d.RuleText == "" {
		return ""
	}
	if d.Source == "" {
		return d.RuleText
	}
	return d.RuleText + " (" + d.Source + ")"
}

// ask asks within the timeout; no Asker is a refusal by nobody.
func (g *Gate) ask(ctx context.Context, r Request) (Reply, time.Duration) {
	if g == nil || g.Asker == nil {
		return Reply{Answer: AnswerDeny, By: "nobody"}, 0
	}
	t := g.Timeout
	if t <= 0 {
		t = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, t)
	defer cancel()
	start := time.Now()
	reply := g.Asker.Ask(ctx, r)
	if reply.Answer == "" {
		reply.Answer = AnswerDeny
	}
	if !reply.Answer.Allows() && reply.By == "" {
		reply.By = "timeout"
		if ctx.Err() == nil {
			reply.By = "nobody"
		}
	}
	return reply, time.Since(start)
}

// remember keeps a "run" or "always" answer for the rest of the run and
// writes "always" back.
func (g *Gate) remember(k Kind, what string, req Request, reply Reply) {
	if what == "" || reply.Answer == AnswerOnce {
		return
	}
	g.grant(k, what)
	if reply.Answer == AnswerAlways && g.Always != nil {
		if err := g.Always(req); err != nil {
			g.record(Record{Time: time.Now(), Kind: k, Subject: what, Decision: "allow", By: reply.By, Answer: reply.Answer, Reason: "allowed for this run only: " + err.Error()})
		}
	}
}

// hint says how to allow a refused action.
func (g *Gate) hint(reply Reply, policyWay string) string {
	var parts []string
	if reply.Note != "" {
		parts = append(parts, reply.Note)
	}
	switch reply.By {
	case "nobody":
		why := "no one to ask"
		if g != nil && g.NoAsker != "" {
			why = g.NoAsker
		}
		parts = append(parts, why)
	case "timeout":
		parts = append(parts, "no answer in time")
	}
	if policyWay != "" {
		parts = append(parts, policyWay)
	}
	return strings.Join(parts, "; ")
}

func (g *Gate) record(r Record) {
	if g != nil && g.Record != nil {
		g.Record(r)
	}
}
