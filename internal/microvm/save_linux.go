package microvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A guest whose root is an image's (Config.RootImage, nothing of the
// host's shared) can be saved to a file and restored from it later, by
// another process too: QEMU's migration, to a descriptor of the file
// hutch opens and passes over the monitor (QEMU runs in an empty root,
// as ids of its own, and opens nothing itself). virtiofsd's devices
// (vhost-user-fs) cannot be migrated by QEMU 7.2: a guest with shares is
// not saved.

// saveTimeout bounds a save and a restore (under emulation a GiB of
// memory takes seconds).
const saveTimeout = 10 * time.Minute

// ErrNotSavable is Save's error for a guest it cannot save.
var ErrNotSavable = errors.New("the guest cannot be saved")

// Savable reports whether Save can save the guest: its root is an image's
// (Config.Validate refuses shares beside one: nothing of the host's is
// shared).
func (v *VM) Savable() bool { return v.root }

// Save stops the guest (QMP's stop) and writes its whole state — memory,
// virtual CPUs and devices — to the file path (made, mode 0600). The
// guest stays stopped: Close it, or Resume it when the save failed.
func (v *VM) Save(path string) error {
	if !v.Savable() {
		return fmt.Errorf("microvm: %w: it shares host directories", ErrNotSavable)
	}
	if err := v.Pause(); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("microvm: save: %w", err)
	}
	defer f.Close()
	if _, err := v.qmp.call("getfd", map[string]string{"fdname": "hutch-save"}, f); err != nil {
		return fmt.Errorf("microvm: save: %w", err)
	}
	if _, err := v.qmp.call("migrate", map[string]any{"uri": "fd:hutch-save"}, nil); err != nil {
		return fmt.Errorf("microvm: save: %w", err)
	}
	if err := v.awaitMigration("save"); err != nil {
		return err
	}
	return f.Sync()
}

// awaitMigration polls QMP's query-migrate until the migration completed
// (nil) or failed, within saveTimeout.
func (v *VM) awaitMigration(what string) error {
	deadline := time.Now().Add(saveTimeout)
	for {
		raw, err := v.qmp.call("query-migrate", nil, nil)
		if err != nil {
			return fmt.Errorf("microvm: %s: %w", what, err)
		}
		var st struct {
			Status    string `json:"status"`
			ErrorDesc string `json:"error-desc"`
		}
		if err := json.Unmarshal(raw, &st); err != nil {
			return fmt.Errorf("microvm: %s: query-migrate: %w", what, err)
		}
		switch st.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("microvm: %s: QEMU's migration %s: %s", what, st.Status, st.ErrorDesc)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("microvm: %s: not done after %v (QEMU's migration: %s)", what, saveTimeout, st.Status)
		}
		select {
		case <-v.done:
			return v.bootErr(what + ": QEMU ended")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Restore starts a VM of cfg — the configuration the saved one had — from
// the state Save wrote to the file state: the guest goes on where it was
// saved, its agent detached (agent.Attach takes the connection, Conn).
func Restore(ctx context.Context, cfg Config, state string) (*VM, error) {
	return start(ctx, cfg, state)
}

// restoreState is start's end for a restore: QEMU, started with
// -incoming defer, connected the agent's port (conn); once its monitor
// and relay port are connected, it loads the state and lets the guest go
// on.
func (v *VM) restoreState(ctx context.Context, conn net.Conn, qmpCh, netCh <-chan accepted, state string) (*VM, error) {
	fail := func(err error) (*VM, error) {
		conn.Close()
		return nil, err
	}
	qc, err := v.awaitQEMU(ctx, qmpCh, "monitor's")
	if err != nil {
		return fail(err)
	}
	v.qmp = newQMP(qc)
	if netCh != nil {
		if v.netConn, err = v.awaitQEMU(ctx, netCh, "relay's"); err != nil {
			return fail(err)
		}
	}
	f, err := os.Open(state)
	if err != nil {
		return fail(fmt.Errorf("microvm: restore: %w", err))
	}
	defer f.Close()
	start := time.Now()
	if _, err := v.qmp.call("getfd", map[string]string{"fdname": "hutch-restore"}, f); err != nil {
		return fail(fmt.Errorf("microvm: restore: %w", err))
	}
	if _, err := v.qmp.call("migrate-incoming", map[string]any{"uri": "fd:hutch-restore"}, nil); err != nil {
		return fail(fmt.Errorf("microvm: restore: %w", err))
	}
	if err := v.awaitMigration("restore"); err != nil {
		return fail(err)
	}
	// Saved stopped, it is restored stopped.
	if err := v.Resume(); err != nil {
		return fail(err)
	}
	v.conn = conn
	v.log.Info("microvm: guest restored", "pid", v.qemu.pid, "emulation", v.emul, "took", time.Since(start))
	return v, nil
}

// awaitHangUp waits (up to 30 s) until QEMU has seen the host's end of the
// port whose character device is label hang up (QMP's query-chardev names
// a socket's that is not connected "disconnected:…"): what it tells the
// guest then is in the state a save writes.
func (v *VM) awaitHangUp(label string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		raw, err := v.qmp.call("query-chardev", nil, nil)
		if err != nil {
			return err
		}
		var devs []struct {
			Label    string `json:"label"`
			Filename string `json:"filename"`
		}
		if err := json.Unmarshal(raw, &devs); err != nil {
			return fmt.Errorf("query-chardev: %w", err)
		}
		for _, d := range devs {
			if d.Label == label && strings.HasPrefix(d.Filename, "disconnected:") {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("QEMU did not see the %s port's host end hang up", label)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// reconnect gives the port whose character device is label a new host
// end, the returned connection: one of a socket pair, whose other end
// QEMU takes over its monitor (getfd) as the device's new backend
// (chardev-change). QEMU, chrooted, could not connect to a path again.
// The caller owns the connection (a relay's ends with it).
func (v *VM) reconnect(label string) (net.Conn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("microvm: reconnect the %s port: %w", label, err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "qemu-"+label)
	defer theirs.Close()
	ours := os.NewFile(uintptr(fds[0]), label)
	conn, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return nil, fmt.Errorf("microvm: reconnect the %s port: %w", label, err)
	}
	name := "hutch-" + label
	if _, err := v.qmp.call("getfd", map[string]string{"fdname": name}, theirs); err != nil {
		conn.Close()
		return nil, fmt.Errorf("microvm: reconnect the %s port: %w", label, err)
	}
	backend := map[string]any{"type": "socket", "data": map[string]any{
		"addr":   map[string]any{"type": "fd", "data": map[string]string{"str": name}},
		"server": false,
	}}
	if _, err := v.qmp.call("chardev-change", map[string]any{"id": label, "backend": backend}, nil); err != nil {
		conn.Close()
		return nil, fmt.Errorf("microvm: reconnect the %s port: %w", label, err)
	}
	return conn, nil
}
