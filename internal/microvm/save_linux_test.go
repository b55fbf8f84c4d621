package microvm

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/microvm/guest"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// busyboxRoot is an EROFS root with the host's static busybox as its
// shell and tools, for a guest of Config.RootImage.
func busyboxRoot(t *testing.T) string {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	testutil.Need(t, err == nil, "no busybox (Debian's busybox-static; scripts/test.sh installs it)")
	_, err = exec.LookPath("mkfs.erofs")
	testutil.Need(t, err == nil, "no mkfs.erofs (Debian's erofs-utils; scripts/test.sh installs it)")
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	for _, d := range []string{"bin", "etc", "workspace"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin/busybox"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, applet := range []string{"sh", "sleep", "cat", "echo", "touch", "head", "od", "tr", "test"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc/motd"), []byte("from the root image\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "root.erofs")
	if out, err := exec.Command("mkfs.erofs", "--quiet", img, root).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.erofs: %v: %s", err, out)
	}
	return img
}

// run runs sh -c script in the guest and returns its output.
func run(ctx context.Context, t *testing.T, c *agent.Client, script string) string {
	t.Helper()
	p, err := c.Exec(ctx, agent.ExecRequest{Args: []string{"/bin/sh", "-c", script}, Dir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	done := make(chan struct{})
	go func() { errOut.ReadFrom(p.Stderr); close(done) }()
	out.ReadFrom(p.Stdout)
	<-done
	st, err := p.Wait()
	if err != nil || st.Code != 0 {
		t.Fatalf("%s: %+v, %v: %s", script, st, err, errOut.String())
	}
	return out.String()
}

// bootImage boots a guest of busyboxRoot's image (256 MiB, with the
// proxy's relay port when relay), closed when the test ends, and returns
// it with its configuration, for a Restore.
func bootImage(ctx context.Context, t *testing.T, log *slog.Logger, relay bool) (*VM, Config) {
	t.Helper()
	k := needVM(t)
	img := busyboxRoot(t)
	id := testutil.UnprivilegedUID
	cfg := Config{Kernel: k, AllowEmulation: true, UID: id, GID: id, Log: log, RootImage: img, Workspace: "/workspace", MemoryMiB: 256, Relay: relay}
	vm, err := Boot(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Close() })
	return vm, cfg
}

// holdValue starts, in the guest of c, a process that holds a random
// value in its memory only and writes it to /workspace/after once
// /workspace/go exists; it returns the value (also in /workspace/before).
func holdValue(ctx context.Context, t *testing.T, c *agent.Client) string {
	t.Helper()
	run(ctx, t, c, `v=$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n'); echo "$v" > /workspace/before
(while ! test -e /workspace/go; do sleep 0.1; done; echo "$v" > /workspace/after) >/dev/null 2>&1 &`)
	return run(ctx, t, c, "cat /workspace/before")
}

// wantValue has holdValue's process of the guest of c write its value,
// and checks it is want.
func wantValue(ctx context.Context, t *testing.T, c *agent.Client, want, what string) {
	t.Helper()
	run(ctx, t, c, "touch /workspace/go")
	if !testutil.Eventually(time.Minute, func() bool {
		_, err := c.Stat(ctx, "/workspace/after")
		return err == nil
	}) {
		t.Fatalf("%s: the process did not go on", what)
	}
	if after := run(ctx, t, c, "cat /workspace/after"); after != want || len(want) != 17 {
		t.Errorf("%s: the value the process held: %q, want %q", what, after, want)
	}
}

// TestSaveRestore: a guest of a root image is saved to a file and
// restored from it by a new QEMU: a process that holds a value in its
// memory only goes on with it, the files of its writable layer are there,
// the agent attaches again, and the guest's clock is the host's again
// (not where it stood when saved), at its pace.
func TestSaveRestore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	vm, cfg := bootImage(ctx, t, testLog(t), false)
	if !vm.Savable() {
		t.Fatal("a guest of a root image is not savable")
	}
	c := agent.NewClient(vm.Conn())
	if got := run(ctx, t, c, "cat /etc/motd"); got != "from the root image\n" {
		t.Errorf("the root image's file: %q", got)
	}
	// The value lives in the process only; it writes it once told to.
	before := holdValue(ctx, t, c)

	conn, err := c.Detach(ctx)
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "state")
	start := time.Now()
	if err := vm.Save(state); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(state)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("saved %d MiB of state in %v", fi.Size()>>20, time.Since(start))
	conn.Close()
	if err := vm.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the host's clock goes on without the guest

	start = time.Now()
	vm2, err := Restore(ctx, cfg, state)
	if err != nil {
		t.Fatal(err)
	}
	defer vm2.Close()
	t.Logf("restored in %v", time.Since(start))
	c2, err := agent.Attach(vm2.Conn())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	wantValue(ctx, t, c2, before, "after the restore")
	// Under emulation the guest keeps the counter as its clock (a busy
	// host's lost ticks made its watchdog fall back to jiffies).
	if cs := strings.TrimSpace(run(ctx, t, c2, "cat /sys/devices/system/clocksource/clocksource0/current_clocksource")); vm2.Emulated() && cs != "tsc" {
		t.Errorf("the guest's clock source is %q, want tsc", cs)
	}
	checkClock(ctx, t, c2)
}

// TestSaveRunning: a guest of a root image is saved while it goes on —
// a snapshot's save — and two copies are restored from that one state.
// The source's relay port gets a new host end (the guest starts a new
// session on it), the source and both copies go on from the process's
// memory, and the copies, reseeded as their agents attach, draw
// different random numbers. The guest's agent exports its root layer as
// an OCI layer's tar, its deletions as whiteouts.
func TestSaveRunning(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	vm, cfg := bootImage(ctx, t, testLog(t), true)
	readMark(t, vm.RelayConn())
	c := agent.NewClient(vm.Conn())
	run(ctx, t, c, "rm /etc/motd")
	before := holdValue(ctx, t, c)

	var layer bytes.Buffer
	if _, err := c.ExportLayer(ctx, &layer); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	tr := tar.NewReader(&layer)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[h.Name] = true
	}
	for _, want := range []string{"workspace/before", "etc/.wh.motd"} {
		if !names[want] {
			t.Errorf("the exported layer has no %s: %v", want, names)
		}
	}

	conn, err := c.Detach(ctx)
	if err != nil {
		t.Fatal(err)
	}
	vm.RelayConn().Close()
	if err := vm.awaitHangUp("net"); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "state")
	if err := vm.Save(state); err != nil {
		t.Fatal(err)
	}
	if err := vm.Resume(); err != nil {
		t.Fatal(err)
	}
	relay, err := vm.reconnect("net")
	if err != nil {
		t.Fatal(err)
	}
	// A new session, hanging up again while the guest missed the hang-up
	// (TestRelayMissedHangUp), as the daemon's serveRelay does.
	session, err := vm.awaitSession(relay, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	c, err = agent.Attach(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := run(ctx, t, c, "cat /workspace/before"); got != before {
		t.Errorf("the source after its save: %q, want %q", got, before)
	}

	var uuids []string
	for i := range 2 {
		cp, err := Restore(ctx, cfg, state)
		if err != nil {
			t.Fatal(err)
		}
		defer cp.Close()
		cc, err := agent.Attach(cp.Conn())
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		wantValue(ctx, t, cc, before, fmt.Sprintf("copy %d", i))
		uuids = append(uuids, run(ctx, t, cc, "cat /proc/sys/kernel/random/uuid"))
	}
	if uuids[0] == uuids[1] {
		t.Errorf("two copies of one save drew the same random UUID %q: their random pools were not reseeded", uuids[0])
	}
	// The source goes on too, its file not the copies'.
	if _, err := c.Stat(ctx, "/workspace/go"); err == nil {
		t.Error("the copies' file is in the source")
	}
}

// readMark reads a relay session's start (guest.RelayMark) from conn.
func readMark(t *testing.T, conn net.Conn) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(2 * time.Minute))
	defer conn.SetReadDeadline(time.Time{})
	got := make([]byte, len(guest.RelayMark))
	if _, err := io.ReadFull(conn, got); err != nil || !bytes.Equal(got, guest.RelayMark) {
		t.Fatalf("the relay's session start: %q, %v", got, err)
	}
}

// TestRelayMissedHangUp: a guest stopped while the host hangs up its
// relay, and connected again as soon as it goes on, may see the port
// connected and its session go on without a new mark; the host's
// serveRelay hangs up again until the guest starts a new session.
func TestRelayMissedHangUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(io.MultiWriter(&logged, testWriter{t}), nil))
	vm, _ := bootImage(ctx, t, log, true)
	readMark(t, vm.RelayConn())
	if err := vm.Pause(); err != nil {
		t.Fatal(err)
	}
	vm.RelayConn().Close()
	if err := vm.awaitHangUp("net"); err != nil {
		t.Fatal(err)
	}
	// QEMU takes a new backend only while the guest runs.
	if err := vm.Resume(); err != nil {
		t.Fatal(err)
	}
	conn, err := vm.reconnect("net")
	if err != nil {
		t.Fatal(err)
	}
	s := &served{vm: vm, proxy: echoProxy{}, log: log}
	r, err := s.serveRelay(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	t.Logf("hung up again: %v", strings.Contains(logged.String(), "hung up again"))
}
