package mcp

import (
	"log/slog"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Defaults of Options.
const (
	// DefaultYield is how long exec waits for a command to end before it
	// answers with a session id (Options.Yield).
	DefaultYield = 10 * time.Second
	// DefaultMaxOutput is how much of a command's output, or of a file,
	// a result carries inline (Options.MaxOutput): beyond it the head and
	// the tail are kept and the rest is published as a resource link.
	DefaultMaxOutput = 64 << 10
)

// Options configure a Server.
type Options struct {
	// Name and Version are the server's, as initialize reports them
	// ("hutch" and "dev" when empty).
	Name, Version string
	// Backend holds the sandboxes the tools act on. Required.
	Backend Backend
	// Owner names who the server serves (a tenant of hutch serve): exec
	// sessions of another owner are unknown to it.
	Owner string
	// Execs holds the commands exec left running (session ids for
	// exec_poll and exec_kill). Servers made for the same owner share one
	// so that a session outlives the MCP session or HTTP request that
	// started it (stateless HTTP makes a server per request). Nil: the
	// server's own.
	Execs *ExecTable
	// Links publishes what is too large for a result (full logs, large
	// files) as HTTP URLs under LinkBase (a "/" is added if it lacks
	// one); nil, or an empty LinkBase, publishes nothing (results are
	// cut, and say so).
	Links    *Links
	LinkBase string
	// Audit, when not nil, is told of every tool call once it ended.
	Audit func(Call)
	// Yield is exec's default yield time (DefaultYield when zero);
	// MaxOutput bounds the output a result carries inline
	// (DefaultMaxOutput when zero).
	Yield     time.Duration
	MaxOutput int
	// Log receives the server's own events; nil discards them.
	Log *slog.Logger
}

// Call is a tool call, as Options.Audit is told of it.
type Call struct {
	// Tool is the tool's name; for a tool that does not exist (Unknown),
	// the name the caller gave, cut to 64 bytes.
	Tool    string
	Unknown bool
	// Sandbox is the sandbox the call named (cut to 64 bytes: an id
	// longer than that names none) or acted on.
	Sandbox string
	// Command is what exec ran (or was refused to run: the arguments
	// of the agent's exec); Paths are the files file_write and file_edit
	// wrote (resolved in the sandbox), once they were found.
	Command  []string
	Paths    []string
	ArgBytes int
	Duration time.Duration
	// Err is the tool error the model was shown, nil when the call
	// succeeded.
	Err error
}

// NewServer returns an MCP server with hutch's tools over o.Backend.
func NewServer(o Options) *sdk.Server {
	if o.Name == "" {
		o.Name = "hutch"
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Execs == nil {
		o.Execs = NewExecTable(nil)
	}
	if o.Yield <= 0 {
		o.Yield = DefaultYield
	}
	if o.MaxOutput <= 0 {
		o.MaxOutput = DefaultMaxOutput
	}
	switch {
	case o.LinkBase == "":
		o.Links = nil
	case !strings.HasSuffix(o.LinkBase, "/"):
		o.LinkBase += "/"
	}
	s := sdk.NewServer(&sdk.Implementation{Name: o.Name, Version: o.Version}, &sdk.ServerOptions{Logger: o.Log})
	register(s, &o)
	return s
}

// register adds the tools to s, and the audit of their calls.
func register(s *sdk.Server, o *Options) {
	t := &tools{o: o, names: map[string]bool{}}
	s.AddReceivingMiddleware(t.audit)
	t.addSandboxTools(s)
	t.addExecTools(s)
	t.addFileTools(s)
	if _, ok := o.Backend.(Interpreters); ok {
		t.addCodeTools(s)
	}
}
