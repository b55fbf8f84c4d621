package ociruntime

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/egress"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// maxEvents bounds a container's file of egress events, and maxProxyLog
// its proxy's log (S7: what the container makes happen is written in
// memory, /run): past them, nothing more is written.
const (
	maxEvents   = 4 << 20
	maxProxyLog = 1 << 20
)

// proxyMain is the egress proxy of a network namespace: args are the
// owning container's state directory and its init's pid. Descriptors 3, 4
// and 5 are its listeners in the namespace (HTTP proxy, SOCKS5, DNS); it
// writes "ok" to descriptor 6 once it serves, or why it cannot. It ends
// when the container's init does, or on SIGTERM (the container's
// poststop hook).
func proxyMain(args []string, stderr io.Writer) int {
	ready := os.NewFile(6, "ready")
	fail := func(err error) int {
		fmt.Fprintf(ready, "%v\n", err)
		fmt.Fprintf(stderr, "hutch-runc: egress proxy: %v\n", err)
		return 1
	}
	if len(args) != 2 {
		return fail(errors.New("usage: egress-proxy STATE-DIR PID"))
	}
	dir := args[0]
	pid, err := strconv.Atoi(args[1])
	if err != nil {
		return fail(err)
	}
	var plan egressPlan
	if err := readJSON(filepath.Join(dir, egressFile), &plan); err != nil {
		return fail(err)
	}
	rules, secs, err := egressRules(plan)
	if err != nil {
		return fail(err)
	}
	events, err := os.OpenFile(filepath.Join(dir, eventsFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fail(err)
	}
	defer events.Close()
	rec := egress.NewRecorder(&cappedWriter{w: events, left: maxEvents})
	id := filepath.Base(dir)
	host := plan.Hostname
	if host == "" {
		host = sandbox.Hostname
	}
	log := slog.New(slog.NewTextHandler(&cappedWriter{w: stderr, left: maxProxyLog}, nil))
	p := &egress.Proxy{Rules: rules, Sandbox: id, Record: rec.Record, Log: log, Hostname: host}
	if len(secs) > 0 || len(plan.Network.Headers) > 0 {
		var pems [][]byte
		for _, f := range plan.UpstreamCAs {
			b, err := os.ReadFile(f)
			if err != nil {
				return fail(fmt.Errorf("--%s: %w", hutchFlagUpstreamCA, err))
			}
			pems = append(pems, b)
		}
		roots, err := egress.UpstreamRoots(pems, func(i int) string { return "--" + hutchFlagUpstreamCA + " " + plan.UpstreamCAs[i] })
		if err != nil {
			return fail(err)
		}
		bundle, err := p.Intercept(id, roots, sandbox.SystemRootsPEM())
		if err != nil {
			return fail(err)
		}
		// Into the file the container's mounts bound already: the same
		// inode, written in place.
		if err := os.WriteFile(filepath.Join(plan.Files, caFile), bundle, 0o644); err != nil {
			return fail(err)
		}
	}
	httpL, err := net.FileListener(os.NewFile(3, "http"))
	if err != nil {
		return fail(err)
	}
	socksL, err := net.FileListener(os.NewFile(4, "socks"))
	if err != nil {
		return fail(err)
	}
	dns, err := net.FilePacketConn(os.NewFile(5, "dns"))
	if err != nil {
		return fail(err)
	}
	var wg sync.WaitGroup
	for _, serve := range []func() error{
		func() error { return p.ServeHTTP(httpL) },
		func() error { return p.ServeSOCKS(socksL) },
		func() error { return p.ServeDNS(dns) },
	} {
		wg.Add(1)
		go func() { defer wg.Done(); serve() }()
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		p.Close()
		return fail(fmt.Errorf("watch the container's init (pid %d): %w", pid, err))
	}
	fmt.Fprintln(ready, "ok")
	ready.Close()

	ended := make(chan struct{})
	go func() {
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err == nil || !errors.Is(err, unix.EINTR) {
				close(ended)
				return
			}
		}
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-ended:
	case <-sig:
	}
	p.Close()
	wg.Wait()
	return 0
}

// cappedWriter writes up to left bytes to w, then drops what follows.
type cappedWriter struct {
	mu   sync.Mutex
	w    io.Writer
	left int
}

func (c *cappedWriter) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(b) > c.left {
		return len(b), nil
	}
	c.left -= len(b)
	return c.w.Write(b)
}
