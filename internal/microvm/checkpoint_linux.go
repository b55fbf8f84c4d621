package microvm

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// Pause to disk under hutch serve (the daemon's checkpointer and
// restorer). A served guest of an image (its root an EROFS image, nothing
// of the host's shared) is saved to its checkpoint directory — QEMU's
// state (VM.Save) and what its restore needs of its configuration — and
// ends; Restore starts a new QEMU of the same configuration from there,
// by this daemon or a later one; its proxy's relay starts a new session
// (guest.RelayMark). A guest over the host's root (virtiofs) is paused in
// memory instead (SavesMemory).

// Names in a checkpoint directory.
const (
	savedState  = "state"   // QEMU's migration stream
	savedConfig = "vm.json" // savedVM
)

// savedVM is what Restore needs of a saved guest's configuration: a new
// QEMU must have the same machine, memory, devices and accelerator.
type savedVM struct {
	Kernel       string `json:"kernel"` // its release
	MemoryMiB    int    `json:"memory_mib"`
	CPUs         int    `json:"cpus"`
	Emulated     bool   `json:"emulated"`
	RootImage    string `json:"root_image"`
	RootSize     int64  `json:"root_size"`
	Workspace    string `json:"workspace"`
	WorkspaceUID int    `json:"workspace_uid"`
	WorkspaceGID int    `json:"workspace_gid"`
	LayerBytes   int64  `json:"layer_bytes"`
	Self         bool   `json:"self"`
	Relay        bool   `json:"relay"`
	// KernelImage is the base name of the kernel image it booted ("":
	// vmlinuz, saved before there was a choice): its restore boots the
	// same.
	KernelImage string `json:"kernel_image,omitempty"`
}

// SavesMemory reports whether the daemon can pause the sandbox to disk
// (Checkpoint): a guest of an image.
func (s *served) SavesMemory() bool { return s.vm.Savable() }

// Checkpoint saves the guest to dir (made here, owner-only; it must not
// exist) and ends it. The agent must be detached (agent.Client.Detach): a
// restored guest's agent reads its new connection from where it stopped.
// When the save fails the guest goes on (or, when it cannot be let go on,
// stays stopped: the error wraps sandbox.ErrFrozen).
func (s *served) Checkpoint(dir string) error {
	if err := s.beginSave(dir); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := s.hangUpRelay(); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := s.vm.Save(filepath.Join(dir, savedState)); err != nil {
		return fmt.Errorf("checkpoint: %w", s.goOn(err))
	}
	// Stopped and saved: its end loses nothing.
	s.closing.Store(true)
	return s.vm.Close()
}

// SaveRunning saves the guest to dir (made here, owner-only; it must not
// exist) as Checkpoint does, stopped meanwhile and while whileFrozen
// (when not nil) runs, and lets it go on: the snapshot of a guest whose
// copies Restore starts, each going on from there. The agent must be
// detached (agent.Client.Detach); its connection goes on after (Attach).
// The proxy's relay starts a new session (RelayMark): the relayed
// connections open at the save end. On error dir is the caller's to
// remove; an error wrapping sandbox.ErrFrozen says the guest stays
// stopped.
func (s *served) SaveRunning(dir string, whileFrozen func() error) error {
	if err := s.beginSave(dir); err != nil {
		return fmt.Errorf("save: %w", err)
	}
	if err := s.hangUpRelay(); err != nil {
		return fmt.Errorf("save: %w", s.goOn(err))
	}
	err := s.vm.Save(filepath.Join(dir, savedState))
	if err == nil && whileFrozen != nil {
		err = whileFrozen()
	}
	if err := s.goOn(err); err != nil {
		return fmt.Errorf("save: %w", err)
	}
	return nil
}

// hangUpRelay ends the relay's session, its host end hung up (the
// relayed connections end), and waits until QEMU has seen it: the guest
// starts a new session (RelayMark) when a host end connects again — a
// restored guest's, or this one's (goOn). A guest stopped before it saw
// the hang-up may see the port connected again and go on with its old
// session: serveRelay hangs up again then.
func (s *served) hangUpRelay() error {
	r := s.proxyRelay()
	if r == nil {
		return nil
	}
	r.Close()
	return s.vm.awaitHangUp("net")
}

// goOn lets the guest go on after a save (err, nil when it succeeded)
// and gives its relay a new host end; it returns err with what failed on
// the way (wrapping sandbox.ErrFrozen when the guest stays stopped).
func (s *served) goOn(err error) error {
	if rerr := s.vm.Resume(); rerr != nil {
		return errors.Join(err, fmt.Errorf("%w: %v", sandbox.ErrFrozen, rerr))
	}
	if s.proxyRelay() == nil {
		return err
	}
	conn, rerr := s.vm.reconnect("net")
	var r *proxyRelay
	if rerr == nil {
		r, rerr = s.serveRelay(conn)
	}
	if rerr != nil {
		return errors.Join(err, fmt.Errorf("the guest goes on without its proxy's relay: %w", rerr))
	}
	s.relayMu.Lock()
	s.relay = r
	s.relayMu.Unlock()
	return err
}

// Bounds of awaitSession's wait for a guest's session: the first wait,
// doubled at each attempt.
const (
	markWait     = 2 * time.Second
	markAttempts = 5
)

// serveRelay serves the sandbox's proxy on conn, a new host end of the
// relay port (a restore's or goOn's), once the guest's session has
// started on it (awaitSession). On error conn is closed.
func (s *served) serveRelay(conn net.Conn) (*proxyRelay, error) {
	mc, err := s.vm.awaitSession(conn, s.log)
	if err != nil {
		return nil, err
	}
	r, err := serveProxyRelay(mc, s.proxy, s.log)
	if err != nil {
		mc.Close()
	}
	return r, err
}

// awaitSession returns conn, a new host end of the relay port, once the
// guest's relay has started a session on it (guest.RelayMark, read). A
// guest that did not see the last hang-up — its port's reader woke to
// find the host connected again, and its old session goes on — starts
// none: the host hangs up again, for longer each time, and reconnects
// (the connection returned is then the last one). On error conn is
// closed.
func (v *VM) awaitSession(conn net.Conn, log *slog.Logger) (*markedConn, error) {
	hold, wait := 100*time.Millisecond, markWait
	for attempt := 1; ; attempt++ {
		mc := &markedConn{Conn: conn}
		err := mc.awaitMark(wait)
		if err == nil {
			return mc, nil
		}
		conn.Close()
		if !errors.Is(err, os.ErrDeadlineExceeded) || attempt == markAttempts {
			return nil, fmt.Errorf("the guest's relay did not start a session: %w", err)
		}
		log.Info("microvm: the guest's relay started no session; hung up again", "attempt", attempt, "hold", hold)
		if err := v.awaitHangUp("net"); err != nil {
			return nil, err
		}
		time.Sleep(hold)
		hold, wait = 2*hold, 2*wait
		if conn, err = v.reconnect("net"); err != nil {
			return nil, err
		}
	}
}

// proxyRelay is the relay of the moment (nil without one).
func (s *served) proxyRelay() *proxyRelay {
	s.relayMu.Lock()
	defer s.relayMu.Unlock()
	return s.relay
}

// beginSave checks that the guest can be saved and runs, makes dir
// (owner-only; it must not exist) and records there what a restore needs
// of its configuration: the start of Checkpoint and SaveRunning.
func (s *served) beginSave(dir string) error {
	if !s.SavesMemory() {
		return ErrNotSavable
	}
	select {
	case <-s.done:
		return errors.New("the guest has ended")
	default:
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(s.saved)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, savedConfig), b, 0o600)
}

// Restore starts the guest Checkpoint saved in dir again, where it was:
// c is the sandbox's configuration as at its start (its root layer's EROFS
// image must be the one it was saved with, unchanged).
func (rt *Runtime) Restore(c sandbox.Config, dir string) (sandbox.Instance, error) {
	if c.Proxy != nil {
		defer func() {
			if c.Proxy != nil {
				c.Proxy.Close()
			}
		}()
	}
	if err := rt.checkStart(c); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(dir, savedConfig))
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	var sv savedVM
	if err := json.Unmarshal(b, &sv); err != nil {
		return nil, fmt.Errorf("restore: %s: %w", savedConfig, err)
	}
	if relayed(c) != sv.Relay {
		return nil, fmt.Errorf("restore: the guest was saved with the proxy's relay %v, and its network now asks for %v", sv.Relay, relayed(c))
	}
	if l := c.RootLayer; l == nil || l.EROFS != sv.RootImage {
		return nil, errors.New("restore: the sandbox's root is no longer the image it was saved with")
	}
	if fi, err := os.Stat(sv.RootImage); err != nil || fi.Size() != sv.RootSize {
		return nil, fmt.Errorf("restore: the root image %s changed or is gone since the save (%v)", sv.RootImage, err)
	}
	k, err := rt.kernel()
	if err != nil {
		return nil, err
	}
	if k.Release != sv.Kernel {
		return nil, fmt.Errorf("restore: the guest was saved running kernel %s, and the kernel now is %s", sv.Kernel, k.Release)
	}
	if emul, err := useEmulation(rt.AllowEmulation); err != nil || emul != sv.Emulated {
		return nil, fmt.Errorf("restore: the guest was saved under %s and would go on under %s (%v)", accelName(sv.Emulated), accelName(emul), err)
	}
	if k, err = k.imageNamed(sv.KernelImage); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	sb, err := rt.launch(c, sv.config(k), filepath.Join(dir, savedState))
	if err != nil {
		return nil, err
	}
	c.Proxy = nil // the sandbox's now
	return sb, nil
}

// accelName names how a guest runs.
func accelName(emulated bool) string {
	if emulated {
		return "software emulation"
	}
	return "KVM"
}

// savedOf is what a save records of a guest of cfg (its root an image's).
func savedOf(cfg Config, emulated bool) (savedVM, error) {
	fi, err := os.Stat(cfg.RootImage)
	if err != nil {
		return savedVM{}, err
	}
	return savedVM{Kernel: cfg.Kernel.Release, KernelImage: filepath.Base(cfg.Kernel.Image),
		MemoryMiB: cfg.MemoryMiB, CPUs: cfg.CPUs, Emulated: emulated,
		RootImage: cfg.RootImage, RootSize: fi.Size(), Workspace: cfg.Workspace, WorkspaceUID: cfg.WorkspaceUID,
		WorkspaceGID: cfg.WorkspaceGID, LayerBytes: cfg.LayerBytes, Self: cfg.Self, Relay: cfg.Relay}, nil
}

// config is the Config of a VM, with kernel k, that runs the guest sv
// describes (launch adds the host's side: ids, directory, log).
func (sv savedVM) config(k *Kernel) Config {
	return Config{Kernel: k, MemoryMiB: sv.MemoryMiB, CPUs: sv.CPUs,
		RootImage: sv.RootImage, Workspace: sv.Workspace, WorkspaceUID: sv.WorkspaceUID, WorkspaceGID: sv.WorkspaceGID,
		LayerBytes: sv.LayerBytes, Self: sv.Self, Relay: sv.Relay}
}
