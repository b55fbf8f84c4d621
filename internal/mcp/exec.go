package mcp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/approve"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Exec bounds.
const (
	// MaxYield bounds yield_ms, of exec and exec_poll.
	MaxYield = 5 * time.Minute
	// DefaultPollYield is how long exec_poll waits for the command to end
	// when yield_ms is not given.
	DefaultPollYield = time.Second
	// MaxExecTimeout bounds exec's timeout_s.
	MaxExecTimeout = 24 * time.Hour
	// MaxCommand bounds the length of exec's command and of its
	// environment.
	MaxCommand = 256 << 10
	// MaxStdin bounds the stdin one exec or exec_poll call writes.
	MaxStdin = 1 << 20
	// progressEvery is how often exec and exec_poll notify a client that
	// asked for progress while they wait.
	progressEvery = time.Second
)

// ExecIn is exec's arguments.
type ExecIn struct {
	Command    string            `json:"command" jsonschema:"the command line, run with /bin/sh -c (pipes, redirections, && and the like work)"`
	Cwd        string            `json:"cwd,omitempty" jsonschema:"the working directory; relative to the sandbox's workspace, which is the default"`
	Env        map[string]string `json:"env,omitempty" jsonschema:"environment variables to set for the command, added to the sandbox's"`
	TimeoutS   int64             `json:"timeout_s,omitempty" jsonschema:"kill the command (its whole process group) once it has run this many seconds; 0 or absent: no limit but the sandbox's lifetime"`
	YieldMS    int64             `json:"yield_ms,omitempty" jsonschema:"how long to wait for the command to end before answering with a session_id while it goes on running, in milliseconds (default 10000, at most 300000)"`
	PTY        bool              `json:"pty,omitempty" jsonschema:"run the command on a terminal (24x80), for programs that behave differently without one; stdout and stderr are then one stream"`
	Stdin      string            `json:"stdin,omitempty" jsonschema:"text to write to the command's stdin as it starts (at most 1 MiB)"`
	CloseStdin bool              `json:"close_stdin,omitempty" jsonschema:"close the command's stdin (after writing stdin, if given), so that a command reading it sees its end; otherwise stdin stays open for exec_poll to write to"`
	SandboxID  string            `json:"sandbox_id,omitempty" jsonschema:"the sandbox to run in; may be left out where a session sandbox is the default"`
}

// ExecPollIn is exec_poll's arguments.
type ExecPollIn struct {
	SessionID  string `json:"session_id" jsonschema:"the session_id exec answered with"`
	Stdin      string `json:"stdin,omitempty" jsonschema:"text to write to the command's stdin first (at most 1 MiB); include the newline a line needs"`
	CloseStdin bool   `json:"close_stdin,omitempty" jsonschema:"close the command's stdin after writing stdin (end of file; on a terminal, ^D)"`
	YieldMS    int64  `json:"yield_ms,omitempty" jsonschema:"how long to wait for the command to end before answering with the output so far, in milliseconds (default 1000, at most 300000)"`
	SandboxID  string `json:"sandbox_id,omitempty" jsonschema:"not needed: the session knows its sandbox; if given, it must be the session's"`
}

// ExecKillIn is exec_kill's arguments.
type ExecKillIn struct {
	SessionID string `json:"session_id" jsonschema:"the session_id exec answered with"`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"not needed: the session knows its sandbox; if given, it must be the session's"`
}

// ExecOut is the result of exec, exec_poll and exec_kill.
type ExecOut struct {
	SessionID       string `json:"session_id,omitempty" jsonschema:"set while the command runs: give it to exec_poll (more output, stdin) or exec_kill"`
	Running         bool   `json:"running" jsonschema:"true: the command still runs (see session_id)"`
	ExitCode        *int   `json:"exit_code,omitempty" jsonschema:"set once the command ended: its exit code, 128+signal when a signal killed it"`
	Signal          int    `json:"signal,omitempty" jsonschema:"the signal that killed the command, if one did"`
	TimedOut        bool   `json:"timed_out,omitempty" jsonschema:"true: timeout_s ran out and the command was killed"`
	Killed          bool   `json:"killed,omitempty" jsonschema:"true: exec_kill killed the command"`
	PID             int    `json:"pid" jsonschema:"the command's process id in the sandbox"`
	Output          string `json:"output" jsonschema:"stdout and stderr, merged in the order they came, since the previous exec_poll of the session; when longer than the server's cap, the head and the tail with a line saying how much was cut between them"`
	TruncatedBytes  int64  `json:"truncated_bytes" jsonschema:"how many bytes of output were cut from the middle of output"`
	OutputURL       string `json:"output_url,omitempty" jsonschema:"when output was cut: an HTTP URL with the command's whole output from its start (valid 30 minutes)"`
	OutputBytes     int64  `json:"output_bytes" jsonschema:"the bytes of output the command wrote in all so far"`
	LogDroppedBytes int64  `json:"log_dropped_bytes,omitempty" jsonschema:"output beyond what the server keeps for output_url (64 MiB), dropped from it"`
	StdinError      string `json:"stdin_error,omitempty" jsonschema:"why stdin was not (all) written, if it was not"`
	DurationMS      int64  `json:"duration_ms" jsonschema:"how long the command has run, in milliseconds"`
}

func (t *tools) addExecTools(s *sdk.Server) {
	addTool(s, t.tool("exec", "Run a command",
		"Run a shell command line in a sandbox (with /bin/sh -c, in the workspace unless cwd says otherwise) and return its output (stdout and stderr merged, in order) and exit code. "+
			"If it has not ended within yield_ms (default 10 s), the answer comes anyway with running=true and a session_id, and the command goes on: "+
			"use exec_poll for the output that follows (or to type into its stdin) and exec_kill to stop it, so a long build, a test suite or a server never blocks you. "+
			"stdin stays open unless close_stdin: a command waiting for input waits for exec_poll's stdin. "+
			"Long output keeps its head and tail and says how many bytes were cut, with output_url for the whole. "+
			"A non-zero exit code is a result, not an error. Cancelling the call kills the command.",
		false, true, false, true), t.exec)
	addTool(s, t.tool("exec_poll", "Poll a running command",
		"Get the output a command started by exec wrote since the last poll, optionally writing to its stdin first; waits up to yield_ms (default 1 s) for the command to end. "+
			"Once it ended, the answer has its exit_code and the session is gone.",
		false, false, false, false), t.execPoll)
	addTool(s, t.tool("exec_kill", "Kill a running command",
		"Kill a command started by exec (SIGKILL to its process group), wait for it to end and return its last output and exit status. The session is gone afterwards.",
		false, true, false, false), t.execKill)
}

// yield is yield_ms as a duration, def when 0.
func yield(ms int64, def time.Duration) (time.Duration, error) {
	switch {
	case ms < 0 || ms > MaxYield.Milliseconds():
		return 0, fmt.Errorf("yield_ms %d: want 0 (the default, %v) to %d", ms, def, MaxYield.Milliseconds())
	case ms == 0:
		return def, nil
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// checkExec checks exec's arguments and returns its yield time.
func (t *tools) checkExec(in ExecIn) (time.Duration, error) {
	n := len(in.Command)
	for k, v := range in.Env {
		n += len(k) + len(v) + 1
		switch {
		case k == "" || strings.ContainsAny(k, "=\x00"):
			return 0, fmt.Errorf("env: %.64q is not a variable name", k)
		case strings.IndexByte(v, 0) >= 0:
			return 0, fmt.Errorf("env %s: the value contains a NUL byte", k)
		}
	}
	switch {
	case strings.TrimSpace(in.Command) == "":
		return 0, errors.New("command is required: a shell command line")
	case strings.IndexByte(in.Command, 0) >= 0:
		return 0, errors.New("command contains a NUL byte")
	case n > MaxCommand:
		return 0, fmt.Errorf("command and env: %d bytes, at most %d (write a script with file_write and run that)", n, MaxCommand)
	case in.TimeoutS < 0 || in.TimeoutS > int64(MaxExecTimeout/time.Second):
		return 0, fmt.Errorf("timeout_s %d: want 0 (none) to %d", in.TimeoutS, int64(MaxExecTimeout/time.Second))
	case len(in.Stdin) > MaxStdin:
		return 0, fmt.Errorf("stdin: %d bytes, at most %d per call", len(in.Stdin), MaxStdin)
	}
	return yield(in.YieldMS, t.o.Yield)
}

func (t *tools) exec(ctx context.Context, req *sdk.CallToolRequest, in ExecIn) (*sdk.CallToolResult, ExecOut, error) {
	wait, err := t.checkExec(in)
	if err != nil {
		return nil, ExecOut{}, err
	}
	env := make([]string, 0, len(in.Env))
	for _, k := range slices.Sorted(maps.Keys(in.Env)) {
		env = append(env, k+"="+in.Env[k])
	}
	// A variable that changes what a command name runs (PATH,
	// LD_PRELOAD, …) is set by the command line itself, where the
	// approval rules see it.
	line, env := approve.ExportRisky(in.Command, env)
	args := []string{"/bin/sh", "-c", line}
	noteChange(ctx, args, "")
	sb, ac, err := t.agentOf(ctx, in.SandboxID)
	if err != nil {
		return nil, ExecOut{}, err
	}
	dir := sb.Workspace
	if in.Cwd != "" {
		if dir, err = resolve(sb, "cwd", in.Cwd); err != nil {
			return nil, ExecOut{}, err
		}
	}
	if err := t.o.Execs.room(t.o.Owner); err != nil {
		return nil, ExecOut{}, err
	}
	// The client's elicitation, where it has one, is asked too: by the
	// backend's approvals, or by the sandbox's own (its agent client's
	// check, on hutch serve).
	actx := t.withElicitation(ctx, req)
	if err := t.approveCommand(actx, sb.ID, line); err != nil {
		return nil, ExecOut{}, err
	}
	p, err := ac.Exec(actx, agent.ExecRequest{
		Args:    args,
		Env:     env,
		Dir:     dir,
		Stdin:   true,
		TTY:     in.PTY,
		Timeout: time.Duration(in.TimeoutS) * time.Second,
	})
	if err != nil {
		return nil, ExecOut{}, err
	}
	var log *execLog
	if t.o.Links != nil {
		log = newExecLog(t.o.MaxOutput)
	}
	s, err := t.o.Execs.start(t.o.Owner, sb.ID, p, t.o.MaxOutput, log)
	if err != nil {
		return nil, ExecOut{}, err
	}
	var stdin <-chan error
	if in.Stdin != "" || in.CloseStdin {
		stdin, _ = s.writeStdin(in.Stdin, in.CloseStdin) // the stdin is new: never busy
	}
	s.wait(ctx, wait, progressEvery, t.progress(ctx, req, wait))
	if ctx.Err() != nil {
		// The call was cancelled: the command goes with it.
		s.kill()
		<-s.ended
		t.o.Execs.remove(s)
		return nil, ExecOut{}, fmt.Errorf("exec cancelled: the command was killed (%w)", ctx.Err())
	}
	return t.report(s, stdin, false)
}

func (t *tools) execPoll(ctx context.Context, req *sdk.CallToolRequest, in ExecPollIn) (*sdk.CallToolResult, ExecOut, error) {
	wait, err := yield(in.YieldMS, DefaultPollYield)
	if err != nil {
		return nil, ExecOut{}, err
	}
	if len(in.Stdin) > MaxStdin {
		return nil, ExecOut{}, fmt.Errorf("stdin: %d bytes, at most %d per call", len(in.Stdin), MaxStdin)
	}
	s, err := t.session(ctx, in.SessionID, in.SandboxID)
	if err != nil {
		return nil, ExecOut{}, err
	}
	var stdin <-chan error
	if in.Stdin != "" || in.CloseStdin {
		if stdin, err = s.writeStdin(in.Stdin, in.CloseStdin); err != nil {
			return nil, ExecOut{}, err
		}
	}
	s.wait(ctx, wait, progressEvery, t.progress(ctx, req, wait))
	if ctx.Err() != nil {
		return nil, ExecOut{}, fmt.Errorf("exec_poll cancelled; the command goes on (%w)", ctx.Err())
	}
	return t.report(s, stdin, false)
}

func (t *tools) execKill(ctx context.Context, _ *sdk.CallToolRequest, in ExecKillIn) (*sdk.CallToolResult, ExecOut, error) {
	s, err := t.session(ctx, in.SessionID, in.SandboxID)
	if err != nil {
		return nil, ExecOut{}, err
	}
	s.kill()
	select {
	case <-s.ended:
	case <-ctx.Done():
		return nil, ExecOut{}, fmt.Errorf("exec_kill: the command got SIGKILL, but the call ended before it did (%w)", ctx.Err())
	}
	return t.report(s, nil, true)
}

// session is the caller's exec session id, in sandbox if that is not "".
func (t *tools) session(ctx context.Context, id, sandbox string) (*session, error) {
	s, err := t.o.Execs.get(t.o.Owner, id)
	if err != nil {
		return nil, err
	}
	if sandbox != "" && sandbox != s.sandbox {
		return nil, fmt.Errorf("session %s runs in sandbox %s, not %s (exec_poll and exec_kill need no sandbox_id)", id, s.sandbox, sandbox)
	}
	noteSandbox(ctx, s.sandbox)
	return s, nil
}

// progress returns a function that notifies the client of the output's
// size while exec or exec_poll waits, if the client asked for progress;
// nil if it did not.
func (t *tools) progress(ctx context.Context, req *sdk.CallToolRequest, wait time.Duration) func(int64) {
	tok := req.Params.GetProgressToken()
	if tok == nil || req.Session == nil {
		return nil
	}
	start := time.Now()
	return func(total int64) {
		err := req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{
			ProgressToken: tok,
			Progress:      time.Since(start).Seconds(),
			Total:         wait.Seconds(),
			Message:       fmt.Sprintf("running; %d bytes of output so far", total),
		})
		if err != nil {
			t.o.Log.Debug("progress notification", "err", err)
		}
	}
}

// report answers with what the session has to report; once the command
// ended, the session is removed.
func (t *tools) report(s *session, stdin <-chan error, killed bool) (*sdk.CallToolResult, ExecOut, error) {
	r := s.take()
	out := ExecOut{PID: s.p.PID, TruncatedBytes: r.cut, OutputBytes: r.total, Killed: killed && r.killed}
	if stdin != nil {
		out.StdinError = stdinOutcome(stdin, r.ended)
	}
	if r.cut > 0 && s.log != nil {
		size, write := s.log.link()
		u, err := t.o.Links.Publish(t.o.Owner, t.o.LinkBase, "exec-"+s.id[:8]+".log", "text/plain; charset=utf-8", size, write)
		if err != nil {
			t.o.Log.Warn("publish exec log", "err", err)
		}
		out.OutputURL = u
		_, out.LogDroppedBytes = s.log.stat()
	}
	out.Output = joinCut(r.head, r.tail, r.cut, out.OutputURL)
	out.DurationMS = time.Since(s.started).Milliseconds()
	var status string
	switch {
	case !r.ended:
		out.SessionID, out.Running = s.id, true
		status = fmt.Sprintf("[still running (pid %d, %s so far): session_id %s — exec_poll for the output that follows or to write to its stdin, exec_kill to stop it]",
			s.p.PID, time.Since(s.started).Round(time.Millisecond), s.id)
	case r.err != nil:
		t.o.Execs.remove(s)
		res := text(out.Output + fmt.Sprintf("\n[the command's end is unknown: %v]", r.err))
		res.IsError = true
		return res, out, nil
	default:
		t.o.Execs.remove(s)
		code := r.status.Code
		out.ExitCode, out.Signal, out.TimedOut = &code, r.status.Signal, r.status.TimedOut
		switch {
		case out.TimedOut:
			status = fmt.Sprintf("[timed out: killed after %s (exit code %d)]", time.Since(s.started).Round(time.Millisecond), code)
		case out.Killed:
			status = fmt.Sprintf("[killed (exit code %d)]", code)
		case r.status.Signal != 0:
			status = fmt.Sprintf("[killed by signal %d (exit code %d)]", r.status.Signal, code)
		default:
			status = fmt.Sprintf("[exit code %d]", code)
		}
	}
	if out.StdinError != "" {
		status += "\n[stdin: " + out.StdinError + "]"
	}
	body := out.Output
	if body != "" && !strings.HasSuffix(body, "\n") {
		body += "\n"
	}
	res := text(body + status)
	if out.OutputURL != "" {
		size := r.total - out.LogDroppedBytes
		res.Content = append(res.Content, &sdk.ResourceLink{
			URI: out.OutputURL, Name: "exec-" + s.id[:8] + ".log", MIMEType: "text/plain",
			Description: "the command's whole output from its start", Size: &size,
		})
	}
	return res, out, nil
}

// stdinOutcome says what became of a write to stdin, "" when it was
// written. Once the command ended, the write ends too (failing, if it was
// not done): the outcome is waited for, a second at most.
func stdinOutcome(stdin <-chan error, ended bool) string {
	var err error
	if ended {
		select {
		case err = <-stdin:
		case <-time.After(time.Second):
			return "still being written when the command ended"
		}
	} else {
		select {
		case err = <-stdin:
		default:
			return "still being written: the command has not read it yet"
		}
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

// writeStdin writes data to the command's stdin (and closes it, if
// asked) in the background; the channel gets the outcome. It fails while
// an earlier write is under way.
func (s *session) writeStdin(data string, close bool) (<-chan error, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p.Stdin == nil {
		return nil, errors.New("stdin: the command has none")
	}
	if s.stdinBusy {
		return nil, errors.New("stdin: the previous input is still being written (the command does not read it); poll without stdin, or exec_kill")
	}
	s.stdinBusy = true
	done := make(chan error, 1)
	go func() {
		var err error
		if data != "" {
			_, err = s.p.Stdin.Write([]byte(data))
		}
		if err == nil && close {
			err = s.p.Stdin.Close()
		}
		if err != nil {
			err = fmt.Errorf("not written: the command's stdin is closed or the command ended (%v)", err)
		}
		s.mu.Lock()
		s.stdinBusy = false
		s.mu.Unlock()
		done <- err
	}()
	return done, nil
}
