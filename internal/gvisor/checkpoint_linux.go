package gvisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// What Checkpoint writes in its directory, and where the layer's tmpfs is
// attached in a sandbox's state directory.
const (
	savedImage  = "image"       // runsc checkpoint's image: the sandbox's kernel, processes and memory
	savedLayer  = "layer"       // the root layer's upper directory (sandbox.SaveLayer)
	savedBundle = "config.json" // the OCI bundle's spec the sandbox ran with
	savedMeta   = "gvisor.json" // savedSandbox
	layerDir    = "layer"       // in the state directory: the layer's tmpfs (RootLayer.Keep)
)

// checkpointTimeout bounds the wait for runsc run to end once it was
// killed, its sandbox saved.
const checkpointTimeout = time.Minute

// savedSandbox is what Restore needs besides the image, the layer and the
// bundle.
type savedSandbox struct {
	// Dir is the state directory the sandbox ran in, which the bundle's
	// paths name.
	Dir string `json:"dir"`
	// NoLayer marks a save without the root layer (SaveRunning): the
	// restored sandbox's root layer is the one its configuration gives
	// (a snapshot's layers, which hold the same files).
	NoLayer bool `json:"no_layer,omitempty"`
}

// readSaved reads the description of the sandbox Checkpoint saved in dir.
func readSaved(dir string) (savedSandbox, error) {
	var sv savedSandbox
	b, err := os.ReadFile(filepath.Join(dir, savedMeta))
	if err != nil {
		return sv, fmt.Errorf("restore: %w", err)
	}
	if err := json.Unmarshal(b, &sv); err != nil {
		return sv, fmt.Errorf("restore: %s: %w", savedMeta, err)
	}
	if !filepath.IsAbs(sv.Dir) || filepath.Clean(sv.Dir) != sv.Dir || sv.Dir == "/" {
		return sv, fmt.Errorf("restore: %s: bad directory %q", savedMeta, sv.Dir)
	}
	return sv, nil
}

// savedSpec is the spec saved in dir, its paths in the state directory
// from moved to the state directory to: runsc's container id and the
// directory may change, the mounts (in their order) may not.
func savedSpec(dir, from, to string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(dir, savedBundle))
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	var o ociSpec
	if err := json.Unmarshal(b, &o); err != nil {
		return nil, fmt.Errorf("restore: %s: %w", savedBundle, err)
	}
	move := func(p string) string {
		if rest, ok := strings.CutPrefix(p, from); ok && (rest == "" || rest[0] == '/') {
			return to + rest
		}
		return p
	}
	o.Root.Path = move(o.Root.Path)
	for i := range o.Mounts {
		o.Mounts[i].Source = move(o.Mounts[i].Source)
	}
	return json.MarshalIndent(o, "", " ")
}

// Restore starts again a sandbox that Checkpoint saved in dir, with c as
// the sandbox's configuration (the one it was started with, but for what
// the daemon rebuilds: the proxy, served on sockets at the same paths in
// the sandbox's view): its processes go on where they were, with their
// memory, and its root layer holds what they wrote. It runs in a state
// directory of its own, as a new sandbox does. The agent answers on the
// instance's connection once a client attaches (agent.Attach). dir is
// left as it is. A save of SaveRunning's starts a copy of the sandbox
// each time, c's root layer holding the files it had (c's view must be
// made as the saved sandbox's was: the same policy's filesystem, network
// mode and resources).
func (rt *Runtime) Restore(c sandbox.Config, dir string) (sandbox.Instance, error) {
	return rt.start(c, dir, false)
}

// Checkpoint saves the sandbox to dir (made here, owner-only; it must not
// exist) and ends it. The sandbox is frozen (runsc pause) while runsc
// checkpoint writes its kernel, processes and memory (the image, with
// --leave-running: a failed save does not end it) and its root layer's
// upper directory, the bundle's spec and its state directory's name are
// copied beside it; then runsc run is killed, and every runsc process of
// the sandbox ends with it. Close then frees what the host holds for it
// (the layer's tmpfs). The agent must be detached (agent.Client.Detach):
// a restored sandbox's agent reads its new connection from where it
// stopped. When anything fails, the sandbox is let go on and the error
// says why.
func (s *served) Checkpoint(dir string) error {
	if s.host != nil {
		return errors.New("checkpoint: a sandbox with the host's workspace cannot be saved (its view is the host's, not a root layer of its own)")
	}
	select {
	case <-s.done:
		return errors.New("checkpoint: the sandbox has ended")
	default:
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	image := filepath.Join(dir, savedImage)
	if err := os.Mkdir(image, 0o700); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := s.runscDo("pause"); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := s.save(dir, image); err != nil {
		if rerr := s.runscDo("resume"); rerr != nil {
			return fmt.Errorf("checkpoint: %w (%w: %v)", err, sandbox.ErrFrozen, rerr)
		}
		return fmt.Errorf("checkpoint: %w", err)
	}
	// Frozen and saved: its end loses nothing. runsc delete waits for
	// the sandbox's processes, its gofer's too, to end.
	s.closing.Store(true)
	cmd := exec.Command(s.runsc, "--root", s.state, "delete", "--force", s.id)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		s.log.Debug("gvisor: runsc delete", "err", err, "out", string(out))
		s.kill()
	}
	select {
	case <-s.done:
	case <-time.After(checkpointTimeout):
		return fmt.Errorf("checkpoint: runsc run did not end within %s of the sandbox's end", checkpointTimeout)
	}
	return nil
}

// save writes the frozen sandbox to dir: runsc's image in image, the root
// layer, the spec and the state directory's name.
func (s *served) save(dir, image string) error {
	if err := s.saveKernel(dir, image, false); err != nil {
		return err
	}
	return sandbox.SaveLayer(filepath.Join(s.dir, layerDir), filepath.Join(dir, savedLayer))
}

// saveKernel writes what runsc checkpoint saves of the frozen sandbox to
// image, the spec and savedSandbox (noLayer: no layer is saved with them)
// to dir. runsc checkpoint writes what the Sentry holds of the sandbox's
// files back to the layer first, so the layer holds all they wrote.
func (s *served) saveKernel(dir, image string, noLayer bool) error {
	args := append(slices.Clip(s.flags), "checkpoint", "--leave-running", "--image-path", image, s.id)
	cmd := exec.Command(s.runsc, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("runsc checkpoint: %v: %s", err, strings.TrimSpace(string(out)))
	}
	b, err := os.ReadFile(filepath.Join(s.dir, "config.json"))
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, savedBundle), b, 0o600)
	}
	if err == nil {
		b, _ = json.Marshal(savedSandbox{Dir: s.dir, NoLayer: noLayer})
		err = os.WriteFile(filepath.Join(dir, savedMeta), b, 0o600)
	}
	return err
}

// LayerDir is where the sandbox's root layer's tmpfs is attached (its
// upper directory "upper" holds what the sandbox wrote), for snapshots
// and diffs to read; "" for a sandbox with the host's view.
func (s *served) LayerDir() string {
	if s.host != nil {
		return ""
	}
	return filepath.Join(s.dir, layerDir)
}

// SaveRunning saves the sandbox to dir (made here, owner-only; it must
// not exist) as Checkpoint does, but without its root layer, and lets it
// go on: frozen (runsc pause) while runsc checkpoint writes its kernel,
// processes and memory, then while whileFrozen copies what it needs (the
// root layer, as the checkpoint left it: LayerDir), then thawed again.
// The sandbox must be running, not frozen. Restore
// starts copies of it from dir, with a root layer of the same files
// (RootLayer.Lowers or FromSnapshot), as many times as asked; dir is
// left as it is. The agent must be detached during the save (its copies
// read their new connection from where it stopped) and attached again
// after. On error dir is the caller's to remove; an error wrapping
// sandbox.ErrFrozen says the sandbox stays frozen.
func (s *served) SaveRunning(dir string, whileFrozen func() error) error {
	if s.host != nil {
		return errors.New("save: a sandbox with the host's workspace cannot be saved (its view is the host's, not a root layer of its own)")
	}
	select {
	case <-s.done:
		return errors.New("save: the sandbox has ended")
	default:
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("save: %w", err)
	}
	image := filepath.Join(dir, savedImage)
	if err := os.Mkdir(image, 0o700); err != nil {
		return fmt.Errorf("save: %w", err)
	}
	if err := s.runscDo("pause"); err != nil {
		return fmt.Errorf("save: %w", err)
	}
	err := s.saveKernel(dir, image, true)
	if err == nil && whileFrozen != nil {
		err = whileFrozen()
	}
	if rerr := s.runscDo("resume"); rerr != nil {
		if err == nil {
			return fmt.Errorf("save: %w: %v", sandbox.ErrFrozen, rerr)
		}
		return fmt.Errorf("save: %w (%w: %v)", err, sandbox.ErrFrozen, rerr)
	}
	if err != nil {
		return fmt.Errorf("save: %w", err)
	}
	return nil
}
