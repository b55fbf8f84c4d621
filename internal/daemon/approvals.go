package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/approve"
	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/egress"
	"github.com/hutch-sandbox/hutch/internal/policy"
)

// Event types of approvals (the approval layer: a policy's approvals and
// network.on_unknown: ask).
const (
	// EventApprovalRequested: a question waits for its answer (data: id,
	// kind, subject, command, rule, reason, expires).
	EventApprovalRequested = "approval.requested"
	// EventApprovalAnswered: a question was answered or expired (data:
	// id, kind, subject, command, answer, by, took_ms).
	EventApprovalAnswered = "approval.answered"
	// EventApprovalDenied: a rule refused without asking (data: kind,
	// subject, command, rule, reason).
	EventApprovalDenied = "approval.denied"
)

// Approver is what a front end needs to show a tenant the questions its
// sandboxes' approvals hold and to answer them; *Manager implements it.
type Approver interface {
	// Approvals are the questions waiting for tenant's answer, oldest
	// first: all of its sandboxes', or sandbox's when it is set.
	Approvals(tenant, sandbox string) []approve.Pending
	// Approval is one of them (ErrNotFound when it is not waiting, or is
	// another tenant's).
	Approval(tenant, id string) (approve.Pending, error)
	// AnswerApproval answers question id of tenant's; by says who (the
	// front end: "api", "web", "mcp"). ErrNotFound when it is not
	// waiting, ErrInvalid for an answer that is none.
	AnswerApproval(tenant, id string, a approve.Answer, by string) error
	// AskWith returns ctx whose questions a also asks (approve.WithAsker),
	// racing the other ways of answering them: an MCP client's
	// elicitation. The first answer wins.
	AskWith(ctx context.Context, a approve.Asker) context.Context
}

var _ Approver = (*Manager)(nil)

// newBroker is the daemon's one Broker: its questions are events of their
// sandboxes.
func (m *Manager) newBroker() *approve.Broker {
	b := &approve.Broker{}
	b.Notify = func(p approve.Pending, reply *approve.Reply) {
		lg := m.eventsOf("", p.Sandbox)
		if lg == nil {
			return
		}
		if reply == nil {
			lg.append(EventApprovalRequested, map[string]any{"id": p.ID, "kind": p.Kind, "subject": p.Subject,
				"command": p.Command, "rule": p.Rule, "reason": p.Reason, "expires": p.Expires}, false)
			return
		}
		lg.append(EventApprovalAnswered, map[string]any{"id": p.ID, "kind": p.Kind, "subject": p.Subject,
			"command": p.Command, "answer": reply.Answer, "by": reply.By, "took_ms": time.Since(p.Created).Milliseconds()}, false)
	}
	return b
}

// newGate is the approval gate of sandbox id of spec, nil when its policy
// neither decides commands (approvals: but files) nor asks about unknown
// hosts: its questions go to the daemon's broker, its decisions to log,
// the audit log and (refusals without a question) its event log (a warm
// sandbox's is made when a tenant takes it). "Allow always" lasts for the
// sandbox's life: a served sandbox has no policy file to write it to.
func (m *Manager) newGate(id string, spec policy.Spec, log *slog.Logger) (*approve.Gate, error) {
	commands := spec.Approvals.HasCommandRules()
	if !commands && spec.Network.OnUnknown != "ask" {
		return nil, nil
	}
	g := m.brokerGate(id, log)
	if commands {
		set, err := spec.Approvals.ApprovalSet()
		if err != nil {
			return nil, invalid("policy: approvals: %v", err)
		}
		g.Commands = set
	}
	if spec.Network.OnUnknown == "ask" {
		g.OnUnknown = approve.Ask
	}
	return g, nil
}

// brokerGate is a gate of sandbox id that asks the daemon's broker and
// records its decisions as newGate says.
func (m *Manager) brokerGate(id string, log *slog.Logger) *approve.Gate {
	g := &approve.Gate{
		Asker:   m.broker,
		Timeout: m.cfg.ApprovalTimeout,
		Sandbox: id,
		NoAsker: "no one answered through the API",
	}
	g.Record = func(r approve.Record) {
		level := slog.LevelInfo
		if r.Decision == "allow" && r.By == "rule" {
			level = slog.LevelDebug // as every exec is
		}
		log.Log(context.Background(), level, "approval", "kind", r.Kind, "subject", r.Subject, "command", r.Command, "decision", r.Decision,
			"rule", r.Rule, "by", r.By, "answer", r.Answer, "took_ms", r.TookMS, "reason", r.Reason)
		if r.Decision == "deny" && r.By == "rule" {
			m.eventsOf("", id).append(EventApprovalDenied, map[string]any{"kind": r.Kind, "subject": r.Subject, "command": r.Command,
				"rule": r.Rule, "reason": r.Reason}, false)
		}
		if al := m.cfg.Audit; al != nil {
			rec := r
			if err := al.Append(audit.Entry{Time: r.Time, Tenant: m.tenantOf(id), Action: "approval", Sandbox: id, Approval: &rec}); err != nil {
				log.Error("audit an approval", "err", err)
			}
		}
	}
	return g
}

// attach makes c the client of l's agent, with what every command of l
// gets: its environment and user, and its approval check.
func (l *live) attach(c *agent.Client) {
	l.client = c
	c.SetEnv(l.execEnv)
	c.SetUser(l.execUser)
	if l.gate != nil && l.gate.Commands != nil {
		c.SetCheck(checkCommand(l.gate, l.ended))
	}
}

// holdUnknown makes p ask l's gate about the hosts no rule allows, when
// its policy says network.on_unknown: ask.
func (l *live) holdUnknown(p *egress.Proxy) {
	if p != nil && l.gate != nil && l.gate.OnUnknown == approve.Ask {
		p.Unknown = l.gate.Host
	}
}

// checkCommand is the agent client's check (agent.Client.SetCheck) of a
// sandbox with gate g: every command is decided on its quoted argv as a
// shell line, after the variables of its own environment that change
// what a name runs (PATH, LD_PRELOAD, …) as assignments, a question
// ending with the sandbox.
func checkCommand(g *approve.Gate, ended <-chan struct{}) agent.CheckFunc {
	return func(ctx context.Context, args, env []string) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-ended:
				cancel()
			case <-ctx.Done():
			}
		}()
		line, _ := approve.ExportRisky(approve.Line(args), env)
		return g.Command(ctx, line)
	}
}

// tenantOf is the tenant of sandbox id while it runs, or while one of
// its change sets is being applied (askingFor), "" otherwise.
func (m *Manager) tenantOf(id string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.live[id]; l != nil {
		return l.tenant
	}
	return m.applying[id]
}

// askingFor makes the questions of ended sandbox id tenant's until the
// function it returns is called: while a change set of it is applied.
func (m *Manager) askingFor(tenant, id string) func() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.applying == nil {
		m.applying = map[string]string{}
	}
	m.applying[id] = tenant
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.applying, id)
	}
}

// Approvals implements Approver.
func (m *Manager) Approvals(tenant, sandbox string) []approve.Pending {
	return m.broker.List(func(p approve.Pending) bool {
		return (sandbox == "" || p.Sandbox == sandbox) && tenant != "" && m.tenantOf(p.Sandbox) == tenant
	})
}

// Approval implements Approver.
func (m *Manager) Approval(tenant, id string) (approve.Pending, error) {
	p, ok := m.broker.Get(id)
	if !ok || tenant == "" || m.tenantOf(p.Sandbox) != tenant {
		return approve.Pending{}, fmt.Errorf("approval %q: %w (not waiting: answered, expired or never asked)", id, ErrNotFound)
	}
	return p, nil
}

// AnswerApproval implements Approver.
func (m *Manager) AnswerApproval(tenant, id string, a approve.Answer, by string) error {
	if _, err := approve.ParseAnswer(string(a)); err != nil {
		return invalid("answer: %v", err)
	}
	if _, err := m.Approval(tenant, id); err != nil {
		return err
	}
	if err := m.broker.Answer(id, a, by); err != nil {
		if errors.Is(err, approve.ErrNotPending) {
			return fmt.Errorf("approval %q: %w (answered or expired meanwhile)", id, ErrNotFound)
		}
		return err
	}
	return nil
}

// AskWith implements Approver.
func (m *Manager) AskWith(ctx context.Context, a approve.Asker) context.Context {
	return approve.WithAsker(ctx, a)
}
