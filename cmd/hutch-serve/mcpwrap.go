package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/cli"
	"github.com/hutch-sandbox/hutch/internal/mcprelay"
	"github.com/hutch-sandbox/hutch/internal/runner"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// wrapGrace is how long the server has to end by itself once the client
// closed its side (hutch's stdin) before its sandbox is killed: less than
// the 2 s MCP's TypeScript SDK waits before it sends SIGTERM.
const wrapGrace = time.Second

const mcpWrapUsage = `Usage: hutch mcp wrap [flags] -- SERVER_COMMAND [ARGS...]

Runs a third-party MCP server (stdio transport) in a sandbox of its own —
the flags of hutch run: its workspace (--workspace, default the current
directory), only the hosts its flags allow (--net proxy --allow-domain …),
secrets as placeholders (--secret NAME@hosts) — and relays the protocol
between the agent's client, on hutch's stdin and stdout, and the server.
The server's stderr is hutch's.

What goes back to the client is filtered: a string holding the real value
of a --secret (also JSON-escaped, percent-encoded or in base64) becomes
"[redacted: secret NAME]"; a match of a --redact pattern in a tool result
or a resource's contents becomes "[redacted: pattern N]". Every tools/call
is recorded (tool, size of the arguments, duration, outcome; never the
arguments) in --report and --audit. When the client closes stdin the
server is ended; when the server ends, so does hutch, with its exit code.

Example (Claude Code):
  claude mcp add fs -- hutch mcp wrap --policy fs.yaml -- npx -y @modelcontextprotocol/server-filesystem .

Flags:
`

// cmdMCPWrap runs `hutch mcp wrap [flags of run] -- SERVER_COMMAND…`.
func cmdMCPWrap(args []string, stdin, stdout, stderr *os.File) int {
	fs, rf := runner.NewFlags("mcp wrap", "", stderr)
	var redact cli.List
	var auditFile string
	fs.Var(&redact, "redact", "redact matches of the regular `pattern` (RE2) in tool results and resource contents before the client sees them (repeatable)")
	fs.StringVar(&auditFile, "audit", "", "append every tools/call (tool, argument size, duration, outcome) to the hash-chained audit log `file` (hutch audit verify FILE checks it)")
	fs.Usage = func() {
		fmt.Fprint(stderr, mcpWrapUsage)
		fs.PrintDefaults()
	}
	if code, done := runner.Parse(fs, args, stderr); done {
		return code
	}
	command := fs.Args()
	if len(command) == 0 {
		fmt.Fprintln(stderr, "hutch: no server command given: hutch mcp wrap [flags] -- SERVER_COMMAND [ARGS...]")
		return sandbox.ExitHutchError
	}
	patterns, err := redactPatterns(redact)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return sandbox.ExitHutchError
	}
	spec, code := rf.Spec(stderr)
	if code != 0 {
		return code
	}
	var alog *audit.Log
	if auditFile != "" {
		if alog, err = audit.Open(auditFile); err != nil {
			fmt.Fprintf(stderr, "hutch: --audit: %v\n", err)
			return sandbox.ExitHutchError
		}
		defer alog.Close()
	}
	// The records are hutch's, not the server's to change.
	for _, f := range []string{auditFile, rf.Report} {
		if abs, err := filepath.Abs(f); f != "" && err == nil {
			spec.Filesystem.DenyWrite = append(spec.Filesystem.DenyWrite, abs)
		}
	}
	if err := rf.RefuseReview(spec, "hutch mcp wrap"); err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return sandbox.ExitHutchError
	}
	sb, err := rf.Prepare(spec, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return sandbox.ExitHutchError
	}
	defer sb.Close()
	// The server's command is decided like hutch run's; its stdio carries
	// MCP, so there is no one to ask: ask is deny.
	if err := sb.Approve(context.Background(), command); err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return sandbox.ExitNotExecutable
	}
	sb.WarnPrivateArgs(command)
	environ, err := sb.Environ(command)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return sandbox.ExitHutchError
	}
	w := &wrapSession{sb: sb, audit: alog, stderr: stderr, patterns: redact}
	return w.run(sb.Config(environ), command, stdin, stdout, patterns)
}

// redactPatterns compiles the --redact patterns.
func redactPatterns(exprs []string) ([]*regexp.Regexp, error) {
	out := make([]*regexp.Regexp, 0, len(exprs))
	for _, e := range exprs {
		re, err := mcprelay.CheckPattern(e)
		if err != nil {
			return nil, fmt.Errorf("--redact: %w", err)
		}
		out = append(out, re)
	}
	return out, nil
}

// wrapSession is one run of hutch mcp wrap: the server's sandbox and
// where its tool calls are recorded.
type wrapSession struct {
	sb       *runner.Sandbox
	audit    *audit.Log
	stderr   *os.File
	patterns []string // as given, for the report
}

// run starts the server in its sandbox and relays until one side ends;
// it returns hutch's exit code.
func (w *wrapSession) run(c sandbox.Config, command []string, stdin, stdout *os.File, patterns []*regexp.Regexp) int {
	var secrets []mcprelay.Secret
	for _, s := range w.sb.Secrets() {
		secrets = append(secrets, mcprelay.Secret{Name: s.Name, Value: s.Value.Bytes()})
	}
	// A client that went away makes writes to stdout fail (EPIPE) rather
	// than kill hutch, which then ends the server and writes its records.
	pipeSig := make(chan os.Signal, 1)
	signal.Notify(pipeSig, syscall.SIGPIPE)
	defer signal.Stop(pipeSig)

	inR, inW, err := os.Pipe() // the server's stdin
	if err != nil {
		fmt.Fprintf(w.stderr, "hutch: %v\n", err)
		return sandbox.ExitHutchError
	}
	defer closeAll(inR, inW)
	outR, outW, err := os.Pipe() // the server's stdout
	if err != nil {
		fmt.Fprintf(w.stderr, "hutch: %v\n", err)
		return sandbox.ExitHutchError
	}
	defer closeAll(outR, outW)
	relay := mcprelay.New(stdout, inW, mcprelay.Options{
		Secrets:  secrets,
		Patterns: patterns,
		Record:   w.record,
		Log:      func(line string) { fmt.Fprintf(w.stderr, "hutch: mcp wrap: %s\n", line) },
	})
	c.Args, c.Stdin, c.Stdout, c.Stderr = command, inR, outW, w.stderr
	errDone := func() {}
	if len(secrets) > 0 {
		// The server's stderr reaches the client's logs: filtered too.
		errR, errW, err := os.Pipe()
		if err != nil {
			fmt.Fprintf(w.stderr, "hutch: %v\n", err)
			return sandbox.ExitHutchError
		}
		copied := make(chan struct{})
		go func() {
			_, _ = io.Copy(w.stderr, relay.StderrFilter(errR))
			errR.Close()
			close(copied)
		}()
		c.Stderr = errW
		errDone = func() { errW.Close(); <-copied }
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type ran struct {
		res sandbox.Result
		err error
	}
	runDone := make(chan ran, 1)
	go func() {
		res, err := w.sb.Runtime.Run(ctx, c)
		runDone <- ran{res, err}
	}()
	clientDone := make(chan error, 1)
	go func() { clientDone <- relay.FromClient(stdin) }()
	serverDone := make(chan error, 1)
	go func() { serverDone <- relay.FromServer(outR) }()

	var r ran
	clientClosed, serverRead := false, false
	for waiting := true; waiting; {
		select {
		case <-clientDone:
			// The client closed its side (or the server's stdin broke):
			// the server is told by the end of its stdin, and ended if it
			// does not end by itself.
			clientDone, clientClosed = nil, true
			inW.Close()
			kill := time.AfterFunc(wrapGrace, cancel)
			defer kill.Stop()
		case err := <-serverDone:
			serverRead = true
			serverDone = nil
			if err != nil {
				// The client is gone: nobody is left to answer.
				clientClosed = true
				cancel()
			}
		case r = <-runDone:
			waiting = false
		}
	}
	killed := ctx.Err() != nil
	cancel()
	inR.Close()
	outW.Close()
	errDone()
	if !serverRead {
		// What the server wrote before it ended still goes to the client
		// (unless the client stopped reading).
		select {
		case <-serverDone:
		case <-time.After(wrapGrace):
		}
	}
	relay.Finish()
	w.summary(relay.Redactions())
	if r.err != nil {
		var ie *sandbox.InitError
		if errors.As(r.err, &ie) {
			fmt.Fprintf(w.stderr, "hutch: %s\n", ie.Msg)
			return ie.Code
		}
		fmt.Fprintf(w.stderr, "hutch: %v\n", r.err)
		return sandbox.ExitHutchError
	}
	w.sb.Finished(r.res)
	if clientClosed && killed {
		// The session ended as the client asked.
		return 0
	}
	return r.res.ExitCode
}

// closeAll closes files, some perhaps closed already.
func closeAll(files ...*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

// toolCallRecord is the --report line of one tools/call.
type toolCallRecord struct {
	Time          time.Time        `json:"time"`
	Sandbox       string           `json:"sandbox"`
	Action        string           `json:"action"` // "tool_call"
	Tool          string           `json:"tool"`
	ArgumentBytes int              `json:"argument_bytes"`
	DurationMS    float64          `json:"duration_ms"`
	Outcome       mcprelay.Outcome `json:"outcome"`
	ErrorCode     int64            `json:"error_code,omitempty"`
	Redactions    int              `json:"redactions,omitempty"`
}

// redactionsRecord is the --report line, at the end, of what the relay
// redacted: strings per secret, matches per pattern.
type redactionsRecord struct {
	Time     time.Time      `json:"time"`
	Sandbox  string         `json:"sandbox"`
	Action   string         `json:"action"` // "redacted"
	Secrets  map[string]int `json:"secrets,omitempty"`
	Patterns map[string]int `json:"patterns,omitempty"`
}

// record writes one tools/call to the report and the audit log.
func (w *wrapSession) record(c mcprelay.Call) {
	id := w.sb.ID()
	w.sb.Note(toolCallRecord{
		Time: c.Start, Sandbox: id, Action: "tool_call", Tool: c.Tool, ArgumentBytes: c.ArgumentBytes,
		DurationMS: float64(c.Duration.Microseconds()) / 1000, Outcome: c.Outcome, ErrorCode: c.ErrorCode, Redactions: c.Redactions,
	})
	if w.audit == nil {
		return
	}
	e := audit.Entry{
		Time: c.Start, Action: "mcp_call", Sandbox: id, Tool: c.Tool,
		BytesIn: int64(c.ArgumentBytes), DurationMS: c.Duration.Milliseconds(),
	}
	switch c.Outcome {
	case mcprelay.OK:
	case mcprelay.Error:
		e.Error = fmt.Sprintf("error %d", c.ErrorCode)
	default:
		e.Error = string(c.Outcome)
	}
	if err := w.audit.Append(e); err != nil {
		fmt.Fprintf(w.stderr, "hutch: --audit: %v\n", err)
	}
}

// summary reports the redactions on stderr and in the report.
func (w *wrapSession) summary(c mcprelay.Counts) {
	if c.Total() == 0 {
		return
	}
	rec := redactionsRecord{Time: time.Now(), Sandbox: w.sb.ID(), Action: "redacted", Secrets: c.Secrets}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(c.Secrets)) {
		parts = append(parts, fmt.Sprintf("%d string(s) holding secret %s", c.Secrets[name], name))
	}
	for i, n := range c.Patterns {
		if n == 0 {
			continue
		}
		if rec.Patterns == nil {
			rec.Patterns = map[string]int{}
		}
		rec.Patterns[w.patterns[i]] = n
		parts = append(parts, fmt.Sprintf("%d match(es) of --redact %q", n, w.patterns[i]))
	}
	w.sb.Note(rec)
	fmt.Fprintf(w.stderr, "hutch: mcp wrap: redacted %s\n", strings.Join(parts, ", "))
}
