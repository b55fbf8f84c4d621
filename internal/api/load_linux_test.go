package api

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// The real daemon starts hutch's own binary (os.Executable), here this
// test binary, as "hutch agent", the PID 1 of every sandbox. An init
// function, not TestMain, so that the package's tests keep theirs free.
func init() { agent.MainIfAgent() }

// loadSandboxes is how many sandboxes TestLoad keeps alive at once; the
// daemon's per-tenant quota is raised above it.
const loadSandboxes = 200

// TestLoad puts a real daemon (package daemon, real sandboxes) behind the
// API on a unix socket and drives it through the SDK: loadSandboxes
// sandboxes created concurrently, each running several commands (run to
// completion, streaming with stdin, a failing one) while all are alive,
// then all destroyed concurrently. Not one call may fail, and nothing may
// remain: no PID 1, no record not stopped, no sandbox directory.
func TestLoad(t *testing.T) {
	stateDir := testStateDir(t)
	m, c, _ := realDaemon(t, daemon.Config{StateDir: stateDir, MaxSandboxes: loadSandboxes + 10, DefaultTimeout: 5 * time.Minute}, Config{})
	// Generous: 200 sandboxes on a busy 2-core machine.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// Create and use every sandbox concurrently; all stay alive until
	// every one has run its commands.
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ids  = make([]string, loadSandboxes)
		errs []error
	)
	fail := func(i int, format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, fmt.Errorf("sandbox %d: "+format, append([]any{i}, args...)...))
	}
	for i := range loadSandboxes {
		wg.Go(func() {
			sb, err := c.Create(ctx, client.CreateOptions{Env: map[string]string{"N": strconv.Itoa(i)}, Labels: map[string]string{"test": "load"}})
			if err != nil {
				fail(i, "create: %v", err)
				return
			}
			ids[i] = sb.ID
			if err := loadExecs(ctx, c, sb.ID, i); err != nil {
				fail(i, "%s: %v", sb.ID, err)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}

	// The PID 1 of each, to check that it ends.
	var pids []int
	rows, err := m.Store().ListSandboxes(ctx, store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	live := 0
	for _, row := range rows {
		if row.State == store.StateRunning {
			live++
		}
		if row.PID > 0 {
			pids = append(pids, row.PID)
		}
	}
	if live != loadSandboxes || len(pids) != loadSandboxes {
		t.Errorf("%d sandboxes running with %d PID 1s, want %d", live, len(pids), loadSandboxes)
	}

	errs = nil
	for i, id := range ids {
		if id == "" {
			continue
		}
		wg.Go(func() {
			if err := c.Destroy(ctx, id); err != nil {
				fail(i, "destroy %s: %v", id, err)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}

	// Nothing left: no PID 1, every record stopped, no directory.
	for _, pid := range pids {
		if !loadGone(pid, 10*time.Second) {
			t.Errorf("PID 1 (host pid %d) still runs after its sandbox was destroyed", pid)
		}
	}
	rows, err = m.Store().ListSandboxes(ctx, store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		if row.State != store.StateStopped {
			t.Errorf("sandbox %s is %s after its destroy", row.ID, row.State)
		}
	}
	if n, err := m.Store().CountSandboxes(ctx, ""); err != nil || n != 0 {
		t.Errorf("%d sandboxes not stopped (%v)", n, err)
	}
	if list, err := c.List(ctx, client.ListOptions{Labels: map[string]string{"test": "load"}}); err != nil {
		t.Error(err)
	} else {
		for _, sb := range list {
			if sb.State != "stopped" {
				t.Errorf("the API lists %s as %s", sb.ID, sb.State)
			}
		}
	}
	if entries, err := os.ReadDir(filepath.Join(stateDir, "sandboxes")); err == nil && len(entries) != 0 {
		t.Errorf("%d sandbox directories left, e.g. %s", len(entries), entries[0].Name())
	}
	if err := m.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}

// loadExecs runs the commands of one sandbox of TestLoad and checks their
// results.
func loadExecs(ctx context.Context, c *client.Client, id string, i int) error {
	n := strconv.Itoa(i)
	res, err := c.Run(ctx, id, client.Command{Args: []string{"sh", "-c", `echo $N; echo $N >n`}})
	if err != nil {
		return fmt.Errorf("echo: %v", err)
	}
	if res.Code != 0 || string(res.Stdout) != n+"\n" {
		return fmt.Errorf("echo: exit code %d, output %q %q", res.Code, res.Stdout, res.Stderr)
	}
	res, err = c.Run(ctx, id, client.Command{Args: []string{"cat", "n"}})
	if err != nil || res.Code != 0 || string(res.Stdout) != n+"\n" {
		return fmt.Errorf("cat n: %v, %+v", err, res)
	}
	res, err = c.Run(ctx, id, client.Command{Args: []string{"sh", "-c", "echo oops >&2; exit 3"}})
	if err != nil || res.Code != 3 || string(res.Stderr) != "oops\n" {
		return fmt.Errorf("exit 3: %v, %+v", err, res)
	}
	// Streaming, with stdin.
	p, err := c.Exec(ctx, id, client.Command{Args: []string{"tr", "a-z", "A-Z"}, Stdin: true})
	if err != nil {
		return fmt.Errorf("exec tr: %v", err)
	}
	go func() {
		_, _ = io.WriteString(p.Stdin, "sandbox "+n+"\n")
		_ = p.Stdin.Close()
	}()
	var stderr bytes.Buffer
	done := make(chan struct{})
	go func() { _, _ = io.Copy(&stderr, p.Stderr); close(done) }()
	out, rerr := io.ReadAll(p.Stdout)
	<-done
	st, err := p.Wait()
	if err != nil || rerr != nil {
		return fmt.Errorf("exec tr: %v, %v", err, rerr)
	}
	if st.Code != 0 || string(out) != "SANDBOX "+n+"\n" {
		return fmt.Errorf("exec tr: exit code %d, output %q %q", st.Code, out, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// loadGone reports whether host process pid is gone (or a zombie) within
// d.
func loadGone(pid int, d time.Duration) bool {
	for end := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return true
		}
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'Z' {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}
