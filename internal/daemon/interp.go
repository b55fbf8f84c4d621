package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/interp"
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

// hasKernels reports whether the layers (host directories, an image's
// and a snapshot's) hold Jupyter kernels. Only a sandbox from an image
// is looked at: the host's root is the host's, whose kernels no sandbox
// was made for.
func hasKernels(lowers []string) bool {
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
// kernels, as the sandbox's user with its environment, and returns once
// it listens: its output goes to log (debug) for as long as it runs. It
// is a command of hutch's own (no approval asks about it), and it runs
// what it is sent as the sandbox's code under the sandbox's policy.
func startInterpreter(ctx context.Context, l *live, log *slog.Logger) error {
	if !l.interp {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, interpreterWait)
	defer cancel()
	p, err := l.client.Exec(ctx, agent.ExecRequest{Args: []string{sandbox.SandboxHutch, interp.Command}, Own: true})
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
