package daemon

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// Sandboxes of this machine that outlive their daemon (docs/ARCHITECTURE.md,
// "A restarted hutch serve takes its sandboxes again"): a namespace-tier
// sandbox without secrets, a change set under review or a snapshot below
// it is started with its agent on a socket in its directory
// (sandbox.Config.AgentSocket) and no parent-death signal, and what the
// next daemon needs that its record does not hold is written next to it
// (lastingFile). A daemon that crashed leaves such sandboxes running; one
// that stops leaves them too when told to (LeaveRunning: hutch serve's
// SIGUSR2), and ends them otherwise, as before. The next daemon on the
// same state directory takes each one again through reattach, the path of
// a cluster's pods, with a local attacher: its agent's connection, its
// egress proxy's sockets and rules, its cgroup, its image's layers held,
// its timers and approvals from the record; one it cannot take is ended
// as a leftover.

// lastingFile is the file, in a sandbox's directory, of what the next
// daemon needs to take the sandbox again (lasting), mode 0600; agentSocket
// is its agent's socket.
const (
	lastingFile = "lasting.json"
	agentSocket = "agent.sock"
)

// lasting is what a sandbox that outlives the daemon keeps for the next
// one.
type lasting struct {
	// Token authenticates a connection to the agent.
	Token string `json:"token"`
	// Operator: its policy is the operator's (its proxy's rules).
	Operator bool `json:"operator,omitempty"`
	// ExecUser is the user its commands run as by default (its image's),
	// nil for the agent's.
	ExecUser *agent.Credential `json:"exec_user,omitempty"`
	// BootEnv is its agent's environment at its start.
	BootEnv []string `json:"boot_env,omitempty"`
	// Handle is what its runtime needs to take it again
	// (sandbox.ReattachConfig.Handle), "" for the namespace tier's.
	Handle string `json:"handle,omitempty"`
	// ExecEnv is the environment its client adds to every command (a
	// warm sandbox's create's), Life what its timeout does; both are set
	// once it is a tenant's (keepLife).
	ExecEnv []string  `json:"exec_env,omitempty"`
	Life    Lifecycle `json:"life"`
}

// lastingOK says whether a sandbox launched on rt with these may outlive
// the daemon: only a fresh one of a runtime that can take its sandboxes
// again (reattacher: the namespace and gVisor tiers), started by root,
// without secrets (which live in the daemon's memory only: the next
// daemon could not substitute them), a change set under review (whose
// overlay the daemon holds) or a snapshot below it (whose layers it holds).
func lastingOK(rt sandbox.Runtime, spec policy.Spec, sec *sandboxSecrets, review *reviewBinding, snap *store.Snapshot) bool {
	_, again := rt.(reattacher)
	return again && os.Geteuid() == 0 && sec == nil && review == nil && snap == nil
}

// reattacher is a runtime of this machine whose sandboxes can outlive the
// daemon (sandbox.Namespaces, gvisor.Runtime): an instance it starts with
// sandbox.Config.AgentSocket the next daemon takes again with Reattach
// (a gVisor sandbox's Handle, recorded, in the ReattachConfig).
type reattacher interface {
	Reattach(r sandbox.ReattachConfig) (sandbox.Instance, error)
}

// handled is an instance of a reattacher's.
type handled interface{ Handle() string }

// sweeper is a runtime of this machine that removes what it holds on the
// host for sandboxes that are gone (gvisor.Runtime): the next daemon calls
// it once it has taken again or ended the sandboxes left to it.
type sweeper interface{ Sweep(log *slog.Logger) }

// makeLasting writes l's lasting file in dir and sets cfg up for a
// sandbox that outlives the daemon.
func makeLasting(dir string, l *live, cfg *sandbox.Config) error {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	ls := lasting{Token: hex.EncodeToString(b[:]), Operator: l.operator, ExecUser: l.execUser, BootEnv: l.bootEnv}
	if err := writeLasting(dir, ls); err != nil {
		return err
	}
	cfg.AgentSocket, cfg.AgentToken = filepath.Join(dir, agentSocket), ls.Token
	return nil
}

// readLasting reads the lasting file of the sandbox in dir.
func readLasting(dir string) (lasting, error) {
	var ls lasting
	if err := readJSONFile(dir, lastingFile, &ls); err != nil {
		return ls, err
	}
	if ls.Token == "" {
		return ls, fmt.Errorf("%s: no token", lastingFile)
	}
	return ls, nil
}

// writeLasting writes ls as the lasting file of the sandbox in dir.
func writeLasting(dir string, ls lasting) error {
	if err := writeJSONFile(dir, lastingFile, ls); err != nil {
		return fmt.Errorf("sandbox directory: %w", err)
	}
	return nil
}

// updateLasting changes, for the next daemon, what the sandbox in dir
// keeps in its lasting file; nothing for a sandbox without one (it does
// not outlive the daemon).
func updateLasting(dir string, change func(*lasting)) error {
	ls, err := readLasting(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	change(&ls)
	return writeLasting(dir, ls)
}

// keepLife records, for the next daemon, what of l is set once it is a
// tenant's: its timeout's lifecycle and its commands' environment.
func (m *Manager) keepLife(l *live) {
	if err := updateLasting(l.dir, func(ls *lasting) { ls.Life, ls.ExecEnv = l.life, l.execEnv }); err != nil {
		m.log.Error("record the sandbox for the next daemon", "sandbox", l.id, "err", err)
	}
}

// savesMemory reports whether inst's memory can be saved: not a gVisor
// sandbox a later daemon took again (its agent listens on a socket of the
// host's, which gVisor does not save, with no connection of the daemon's
// own to close it on: gvisor's SavesMemory). Its pause and snapshots then
// keep its files, as the namespace tier's do.
func savesMemory(inst instance) bool {
	s, ok := inst.(interface{ SavesMemory() bool })
	return !ok || s.SavesMemory()
}

// unlast makes l, whose agent was detached on the connection it was
// started with for a save of its memory, a sandbox that no longer
// outlives the daemon: a gVisor sandbox's agent stops listening for the
// next daemon then (gvisor's lasting_linux.go), and this one ends it at
// its close.
func (m *Manager) unlast(l *live) {
	if l.tier == policy.TierNamespace {
		return
	}
	if err := os.Remove(filepath.Join(l.dir, lastingFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		m.log.Error("the sandbox no longer outlives the daemon", "sandbox", l.id, "err", err)
	}
}

// isLasting says whether the sandbox in dir outlives the daemon.
func isLasting(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, lastingFile))
	return err == nil
}

// LeaveRunning makes Close leave the sandboxes that can outlive the
// daemon running, for the next daemon on the same state directory to
// take again (an upgrade), rather than end them.
func (m *Manager) LeaveRunning() { m.leaving.Store(true) }

// attacher is what reattach needs to take a sandbox again: a remote
// runtime (remoteAttach) or this machine's namespace tier (localAttach).
type attacher interface {
	// where names where the sandboxes run, for messages.
	where() string
	// gone reports whether an error of attach says the sandbox is gone.
	gone(err error) bool
	// attach takes sb's sandbox again, and fills in what of l the
	// runtime holds here (l's events and approval gate are made).
	attach(m *Manager, l *live, sb store.Sandbox, spec policy.Spec, log *slog.Logger) (sandbox.Instance, error)
}

// remoteAttach is a remote runtime's attacher.
type remoteAttach struct{ rt remoteRuntime }

func (r remoteAttach) where() string       { return r.rt.Remote() }
func (r remoteAttach) gone(err error) bool { return r.rt.Gone(err) }
func (r remoteAttach) attach(_ *Manager, _ *live, sb store.Sandbox, _ policy.Spec, _ *slog.Logger) (sandbox.Instance, error) {
	return r.rt.Attach(sb.ID)
}

// localAttach is the attacher of this machine's sandboxes (the namespace
// tier's, and a reattacher's); every error of its says the sandbox is
// gone (it is then ended as a leftover).
type localAttach struct{}

func (localAttach) where() string     { return "this machine" }
func (localAttach) gone(e error) bool { return e != nil }

func (localAttach) attach(m *Manager, l *live, sb store.Sandbox, spec policy.Spec, log *slog.Logger) (sandbox.Instance, error) {
	ls, err := readLasting(l.dir)
	if err != nil {
		return nil, fmt.Errorf("it was not left to outlive its daemon: %w", err)
	}
	if sb.PID <= 0 {
		return nil, errors.New("no PID 1 recorded")
	}
	// What this daemon would not create it does not take again either:
	// a tier below its --min-tier, egress rules it refuses (--no-internet).
	if err := m.checkTier(sb.Tier); err != nil {
		return nil, err
	}
	if err := m.checkNetwork(spec, ls.Operator); err != nil {
		return nil, fmt.Errorf("its egress rules: %w", err)
	}
	pidfd, err := openProcess(sb.PID, sb.PIDStart)
	if err != nil {
		return nil, err
	}
	l.operator, l.execUser, l.bootEnv = ls.Operator, ls.ExecUser, ls.BootEnv
	l.execEnv, l.life = ls.ExecEnv, ls.Life
	l.volumes = len(sb.Volumes) > 0
	if keep := filepath.Join(l.dir, keepDir); isDir(keep) {
		l.keep = keep
	}
	if ref, ok := spec.Image(); ok {
		// Its image's layers, held in use again.
		img, _, layer, release, err := m.imageLayer(ref, spec)
		if err != nil {
			closeFD(pidfd)
			return nil, fmt.Errorf("its image: %w", err)
		}
		l.release, l.image, l.imageDirs = release, img.Digest, layer.Lowers
		l.interp = HasKernels(layer.Lowers)
	}
	var proxy sandbox.Proxy
	if spec.Network.Mode == "proxy" || spec.Network.Mode == "none" {
		p, err := newProxy(spec.Network, m.cfg.AllowPrivate, ls.Operator, sb.ID, log, l.ev, nil)
		if err != nil {
			closeFD(pidfd)
			return nil, err
		}
		l.holdUnknown(p)
		proxy, l.proxy = p, p
	}
	rc := sandbox.ReattachConfig{
		PIDFD:       pidfd,
		AgentSocket: filepath.Join(l.dir, agentSocket),
		AgentToken:  ls.Token,
		CgroupName:  sandboxCgroupPrefix + sb.ID,
		Proxy:       proxy,
		Log:         log,
		Handle:      ls.Handle,
	}
	rt, err := m.runtime(sb.Tier)
	if err != nil {
		closeFD(pidfd)
		return nil, err
	}
	again, ok := rt.(reattacher)
	if !ok {
		closeFD(pidfd)
		return nil, fmt.Errorf("tier %s: its sandboxes are not taken again", sb.Tier)
	}
	inst, err := again.Reattach(rc)
	if err != nil {
		return nil, err
	}
	if k, ok := inst.(layerKeeper); ok {
		l.keep = k.LayerDir()
	}
	return inst, nil
}

// isDir reports whether path is a directory.
func isDir(path string) bool {
	st, err := os.Lstat(path)
	return err == nil && st.IsDir()
}
