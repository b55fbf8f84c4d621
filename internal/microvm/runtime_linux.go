package microvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/microvm/guest"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// bootTimeout bounds a guest's boot under hutch run (emulation included).
const bootTimeout = 5 * time.Minute

// Run runs c.Args in a new guest and waits for it: the contract of
// sandbox.Run. The guest's root is the host's system directories
// (SystemDirs, read-only, the policy's deny_read hidden), its workspace
// the policy's, shared read-write; the command runs as the workspace's
// owner, in the workspace, with c.Environ, on a terminal of the guest's
// when c.Stdin is one.
func (rt *Runtime) Run(ctx context.Context, c sandbox.Config) (res sandbox.Result, err error) {
	res.ExitCode = sandbox.ExitHutchError
	if c.Proxy != nil {
		// In network mode "none" the proxy refuses everything and the
		// guest has no way to it (no relay port).
		defer c.Proxy.Close()
	}
	if err := rt.check(c); err != nil {
		return res, err
	}
	k, err := rt.kernel()
	if err != nil {
		return res, err
	}
	s := c.Spec
	ws := s.Filesystem.Workspace
	st, err := os.Stat(ws)
	if err != nil {
		return res, fmt.Errorf("workspace: %w", err)
	}
	owner := st.Sys().(*syscall.Stat_t)
	warn := c.Warn
	if warn == nil {
		warn = io.Discard
	}
	// The workspace's protected paths (the default deny-write names, the
	// home's own where the home lies in the workspace, every git
	// directory, the policy's deny_write) and its deny-read paths, as in
	// the other tiers: mounted over it where virtiofsd serves it
	// (protectWorkspace), and what the command made that would run
	// commands outside it set aside once the guest has ended.
	prot, err := sandbox.Protect(s, sandbox.EnvHome(c.Environ), c.Log)
	if err != nil {
		return res, err
	}
	defer func() { res.SetAside = prot.Finish() }()
	for _, w := range prot.Warnings {
		fmt.Fprintf(warn, "hutch: warning: %s\n", w)
	}
	// The workspace by its real path, where its protections are mounted
	// (virtiofsd refuses a source that is a symbolic link): one entered
	// through a link is there in the guest too.
	ws = prot.Spec.Filesystem.Workspace
	env := c.Environ
	var boot guest.Boot
	if relayed(c) {
		if boot.Files, env, err = netFiles(c, env); err != nil {
			return res, err
		}
	}
	bctx, cancel := context.WithTimeout(ctx, bootTimeout)
	defer cancel()
	vm, err := Boot(bctx, Config{
		Kernel:         k,
		Init:           rt.init(),
		MemoryMiB:      int(s.Resources.MemoryBytes >> 20),
		CPUs:           int(s.Resources.CPUs),
		AllowEmulation: rt.AllowEmulation,
		// QEMU gives up root once it has opened its files and connected
		// to virtiofsd: the unused ids the other tiers run sandboxes as.
		UID: sandbox.RootMappedID,
		GID: sandbox.RootMappedID,
		Log: c.Log,
		Share: &Share{
			Workspace: ws,
			Hide:      append(policy.DefaultDenyRead(""), s.Filesystem.DenyRead...),
			Virtiofsd: rt.Virtiofsd,
			Mount: func(emptyFile, emptyDir string) error {
				return protectWorkspace(prot, emptyFile, emptyDir)
			},
		},
		Relay: relayed(c),
		Boot:  boot,
	})
	if errors.Is(err, ErrNoAccel) {
		return res, noAccelErr()
	}
	if err != nil {
		return res, err
	}
	defer vm.Close()
	if vm.Emulated() {
		fmt.Fprintln(warn, "hutch: no KVM: the microVM runs under software emulation (--allow-emulation), tens of times slower")
	}
	client := agent.NewClient(vm.Conn())
	defer client.Close()
	if relayed(c) {
		r, err := serveProxyRelay(vm.RelayConn(), c.Proxy, c.Log)
		if err != nil {
			return res, err
		}
		defer r.Close()
	}

	req := agent.ExecRequest{
		Args:    c.Args,
		Env:     env,
		Dir:     ws,
		Stdin:   c.Stdin != nil,
		Timeout: s.Resources.Timeout,
		User:    &agent.Credential{UID: owner.Uid, GID: owner.Gid},
	}
	tty := sandbox.IsTerminal(c.Stdin)
	if tty {
		req.TTY = true
		req.Rows, req.Cols, _ = sandbox.TerminalSize(c.Stdin)
	}
	p, err := client.Exec(ctx, req)
	if err != nil {
		// A command not found or not executable ends as a shell's would.
		if e, ok := errors.AsType[*agent.Error](err); ok {
			switch e.Code {
			case agent.CodeNotFound:
				res.ExitCode = sandbox.ExitNotFound
				return res, &sandbox.InitError{Msg: e.Error(), Code: sandbox.ExitNotFound}
			case agent.CodePermissionDenied:
				res.ExitCode = sandbox.ExitNotExecutable
				return res, &sandbox.InitError{Msg: e.Error(), Code: sandbox.ExitNotExecutable}
			}
		}
		return res, err
	}
	if tty {
		if restore, err := sandbox.RawTerminal(c.Stdin); err == nil {
			defer restore()
		}
	}
	stop := relaySignals(p, c.Stdin, tty)
	defer stop()

	var wg sync.WaitGroup
	copyOut := func(w *os.File, r io.Reader) {
		defer wg.Done()
		if w == nil {
			w, _ = os.Open(os.DevNull)
			defer w.Close()
		}
		io.Copy(w, r)
	}
	wg.Add(2)
	go copyOut(c.Stdout, p.Stdout)
	go copyOut(c.Stderr, p.Stderr)
	if p.Stdin != nil {
		go func() {
			io.Copy(p.Stdin, c.Stdin)
			p.Stdin.Close()
		}()
	}
	es, err := p.Wait()
	wg.Wait()
	if err != nil {
		return res, err
	}
	res.ExitCode, res.TimedOut = es.Code, es.TimedOut
	if es.TimedOut {
		res.ExitCode = sandbox.ExitTimeout
	}
	return res, nil
}

// relaySignals passes the signals hutch gets on to the command, and the
// terminal's new size on SIGWINCH.
func relaySignals(p *agent.Process, term *os.File, tty bool) (stop func()) {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2, unix.SIGWINCH)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case sig := <-sigs:
				if sig == unix.SIGWINCH {
					if tty {
						if rows, cols, err := sandbox.TerminalSize(term); err == nil {
							p.Resize(rows, cols)
						}
					}
					continue
				}
				p.Signal(sig.(syscall.Signal))
			}
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
	}
}

// check refuses what Run cannot do: another tier's spec, hutch not root,
// a field the tier refuses (policy.TierRefusals), an image or a writable
// root layer.
func (rt *Runtime) check(c sandbox.Config) error {
	s := c.Spec
	if err := checkSpec(s); err != nil {
		return err
	}
	if len(c.Args) == 0 {
		return errors.New("no command given")
	}
	if c.Image != nil || c.RootLayer != nil {
		return fmt.Errorf("tier %q: an image or a writable root is not supported in this version", policy.TierMicroVM)
	}
	if s.Network.Mode == "proxy" && c.Proxy == nil {
		return fmt.Errorf("tier %q: network mode \"proxy\" without hutch's egress proxy", policy.TierMicroVM)
	}
	return nil
}

// checkSpec refuses, for Run and Start, another tier's spec, hutch not
// root and a field the tier refuses (policy.TierRefusals).
func checkSpec(s policy.Spec) error {
	switch {
	case s.Tier != policy.TierMicroVM:
		return fmt.Errorf("tier %q: not the microvm tier", s.Tier)
	case os.Geteuid() != 0:
		return fmt.Errorf("tier %q needs hutch to run as root in this version (virtiofsd shares the host's files as any user)", policy.TierMicroVM)
	}
	if r := policy.TierRefusals(s); len(r) > 0 {
		return fmt.Errorf("tier %q: %s", policy.TierMicroVM, strings.Join(r, "; "))
	}
	return nil
}

// kernel is the guest kernel of KernelDir, else the cache's current one.
func (rt *Runtime) kernel() (*Kernel, error) {
	if rt.KernelDir != "" {
		return LoadKernel(rt.KernelDir)
	}
	return FindKernel("")
}

// init is Init, else hutch-agent beside the running binary (smaller, and
// static), else the running binary.
func (rt *Runtime) init() string {
	if rt.Init != "" {
		return rt.Init
	}
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	agentBin := filepath.Join(filepath.Dir(exe), "hutch-agent")
	if st, err := os.Stat(agentBin); err == nil && st.Mode().IsRegular() {
		return agentBin
	}
	return exe
}
