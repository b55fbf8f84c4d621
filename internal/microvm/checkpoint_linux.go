package microvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

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
	if !s.SavesMemory() {
		return fmt.Errorf("checkpoint: %w", ErrNotSavable)
	}
	select {
	case <-s.done:
		return errors.New("checkpoint: the guest has ended")
	default:
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := writeSaved(dir, s.saved); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if s.relay != nil {
		// The relay's host end hangs up: the guest's session ends, and
		// its next starts with the restored guest's host (RelayMark).
		// Its relayed connections end here.
		s.relay.Close()
		if err := s.vm.awaitHangUp("net"); err != nil {
			return fmt.Errorf("checkpoint: %w; the guest goes on, its proxy's relay ended", err)
		}
	}
	if err := s.vm.Save(filepath.Join(dir, savedState)); err != nil {
		if rerr := s.vm.Resume(); rerr != nil {
			return fmt.Errorf("checkpoint: %w (%w: %v)", err, sandbox.ErrFrozen, rerr)
		}
		if s.relay != nil {
			// Its relay does not come back on this QEMU, whose end
			// hung up: the guest goes on without one.
			return fmt.Errorf("checkpoint: %w; the guest goes on, its proxy's relay ended", err)
		}
		return fmt.Errorf("checkpoint: %w", err)
	}
	// Stopped and saved: its end loses nothing.
	s.closing.Store(true)
	return s.vm.Close()
}

func writeSaved(dir string, v savedVM) error {
	b, err := json.Marshal(v)
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
	sb, err := rt.launch(c, sv.config(k), func(ctx context.Context, cfg Config) (*VM, error) {
		return Restore(ctx, cfg, filepath.Join(dir, savedState))
	})
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
	return savedVM{Kernel: cfg.Kernel.Release, MemoryMiB: cfg.MemoryMiB, CPUs: cfg.CPUs, Emulated: emulated,
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
