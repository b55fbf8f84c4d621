package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/interp"
	"github.com/hutch-sandbox/hutch/internal/portfwd"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// KernelDirs are where a root's Jupyter kernels are installed: a
// sandbox from an image with one of them gets hutch's code interpreter
// (package interp) on its port interp.Port, started with it. Its PID 1
// is then hutch's whole binary, which serves the interpreter too, not the
// lean hutch-agent, which leaves the interpreter's HTTP server out (a
// few MB of memory in every other sandbox).
var KernelDirs = []string{"usr/share/jupyter/kernels", "usr/local/share/jupyter/kernels"}

// interpreterWait bounds the interpreter's start (not its kernels',
// which start in the background and which a first execution waits for).
const interpreterWait = time.Minute

// HasKernels reports whether the layers (host directories, an image's
// and a snapshot's) hold Jupyter kernels. Only a sandbox from an image
// is looked at: the host's root is the host's, whose kernels no sandbox
// was made for.
func HasKernels(lowers []string) bool {
	for _, l := range lowers {
		for _, d := range KernelDirs {
			if fi, err := os.Stat(filepath.Join(l, d)); err == nil && fi.IsDir() {
				return true
			}
		}
	}
	return false
}

// startInterpreter starts the code interpreter in l's sandbox when it has
// kernels (StartInterpreter).
func startInterpreter(ctx context.Context, l *live, log *slog.Logger) error {
	if !l.interp {
		return nil
	}
	return StartInterpreter(ctx, l.client, log)
}

// StartInterpreter starts the code interpreter in the sandbox whose agent
// c is (its PID 1 hutch's whole binary, which serves it: the lean agent
// binary does not), as the sandbox's user with its environment, and
// returns once it listens: its output goes to log (debug) for as long as
// it runs. It is a command of hutch's own (no approval asks about it),
// and it runs what it is sent as the sandbox's code under the sandbox's
// policy.
func StartInterpreter(ctx context.Context, c *agent.Client, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, interpreterWait)
	defer cancel()
	p, err := c.Exec(ctx, agent.ExecRequest{Args: []string{sandbox.SandboxHutch, interp.Command}, Own: true})
	if err != nil {
		return fmt.Errorf("code interpreter: %w", err)
	}
	go drainLog(p.Stdout, log)
	listening := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(io.LimitReader(p.Stderr, 1<<20))
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "listening ") {
				close(listening)
				break
			}
			log.Debug("code interpreter", "line", sc.Text())
		}
		drainLog(p.Stderr, log)
	}()
	exited := make(chan error, 1)
	go func() {
		st, err := p.Wait()
		if err == nil {
			err = fmt.Errorf("exited (%v)", st)
		}
		exited <- err
		log.Debug("code interpreter ended", "status", st, "err", err)
	}()
	select {
	case <-listening:
		log.Debug("code interpreter listening", "port", interp.Port)
		return nil
	case err := <-exited:
		return fmt.Errorf("code interpreter: %w", err)
	case <-ctx.Done():
		return fmt.Errorf("code interpreter: not listening after %v", interpreterWait)
	}
}

// drainLog logs r's lines at debug until it ends.
func drainLog(r io.Reader, log *slog.Logger) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 64<<10)
	for sc.Scan() {
		log.Debug("code interpreter", "line", sc.Text())
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		io.Copy(io.Discard, r)
	}
}

// agentBinary is the binary l's sandbox runs as its PID 1: the daemon's
// own when l has the code interpreter (which the lean agent binary does
// not serve), else the agent binary of the configuration.
func (m *Manager) agentBinary(l *live) string {
	if l.interp {
		return ""
	}
	return m.cfg.AgentBinary
}

// ErrNoInterpreter is wrapped by Interpreter's error for a sandbox without
// the code interpreter.
var ErrNoInterpreter = fmt.Errorf("no code interpreter: its image has no Jupyter kernels (hutch's code-interpreter image has them: scripts/base-image.sh --code-interpreter): %w", ErrUnsupported)

// Interpreter returns a client of the code interpreter of tenant's
// sandbox id, whose connections are made inside the sandbox, to its
// loopback port interp.Port (portfwd.Dial), as any port's are. The same
// client serves the sandbox's calls while its agent connection lasts.
func (m *Manager) Interpreter(ctx context.Context, tenant, id string) (*interp.Client, error) {
	c, err := m.Agent(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.live[id]
	if l == nil || l.client != c {
		return nil, fmt.Errorf("sandbox %s: it changed meanwhile: %w", id, ErrConflict)
	}
	if !l.interp {
		return nil, fmt.Errorf("sandbox %s: %w", id, ErrNoInterpreter)
	}
	return l.interpreter(), nil
}

// interpreter is the client of l's code interpreter, made anew when l's
// agent client changed (after a pause); the caller holds Manager.mu.
func (l *live) interpreter() *interp.Client {
	c := l.client
	if l.interpClient == nil || l.interpAgent != c {
		if l.interpClient != nil {
			l.interpClient.CloseIdle()
		}
		l.interpAgent = c
		l.interpClient = interp.NewClient(func(ctx context.Context) (net.Conn, error) { return portfwd.Dial(ctx, c, interp.Port) })
	}
	return l.interpClient
}

// interpreterEnv gives the code interpreter of warm sandbox l, which
// started before a create took it, the create's environment, which the
// sandbox's commands get from now on (its kernels before their next
// execution).
func (m *Manager) interpreterEnv(ctx context.Context, l *live, env map[string]string) error {
	if !l.interp {
		return nil
	}
	m.mu.Lock()
	ic := l.interpreter()
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, interpreterWait)
	defer cancel()
	if err := ic.SetEnv(ctx, env); err != nil {
		return fmt.Errorf("code interpreter: %w", err)
	}
	return nil
}

// EventCodeExecuted is the event of an execution of the code interpreter
// through hutch's API (data: language, context, duration_ms, error: the
// exception's name if it raised one, code: its first bytes).
const EventCodeExecuted = "code.executed"

// kernelsWait bounds how long a warm sandbox's kernels may take to start.
const kernelsWait = 2 * time.Minute

// interpreterReady waits until the kernels of warm sandbox l's code
// interpreter run, if it has one: a create that takes it finds them warm.
func (m *Manager) interpreterReady(ctx context.Context, l *live) error {
	if !l.interp {
		return nil
	}
	m.mu.Lock()
	ic := l.interpreter()
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, kernelsWait)
	defer cancel()
	if err := ic.Ready(ctx); err != nil {
		return fmt.Errorf("code interpreter: waiting for its kernels: %w", err)
	}
	return nil
}
