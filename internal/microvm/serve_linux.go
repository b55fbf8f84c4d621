package microvm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hutch-sandbox/hutch/internal/cgroups"
	"github.com/hutch-sandbox/hutch/internal/microvm/guest"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// Start starts a long-lived sandbox for hutch serve: a guest whose PID 1
// is hutch's agent, serving the agent's protocol on its virtio-serial
// port, whose host end is the instance's Conn (the contract of
// sandbox.Start). The guest's root is the host's system directories
// (SystemDirs, read-only, with the policy's deny_read, the root layer's
// Hide and Remove and the default deny-read list hidden) under a
// writable layer in the guest's memory of the root layer's size
// (resources.disk); the workspace is a directory made in that layer,
// nothing of the host's, as a served sandbox's of the other tiers is. The
// agent runs as the guest's root, the VM being the boundary; its
// commands start with c.Environ. In network mode "proxy" the guest's
// proxy addresses are relayed to c.Proxy, as under Run. The guest's
// memory and virtual CPUs are the policy's.
//
// The sandbox dies with hutch (S4): QEMU and virtiofsd run under
// reapers that end them with the process that started them
// (startReaped), whatever the guest does. Freeze and Thaw stop and
// resume the guest's virtual CPUs over QEMU's monitor. What the tier
// cannot do yet is refused: an image, a root layer that starts from a
// save or a snapshot, volumes, a workspace under review, outliving hutch
// (c.AgentSocket).
func (rt *Runtime) Start(c sandbox.Config) (sandbox.Instance, error) {
	if c.Proxy != nil {
		// Closed with the sandbox from here on; on error, now.
		defer func() {
			if c.Proxy != nil {
				c.Proxy.Close()
			}
		}()
	}
	if err := rt.checkStart(c); err != nil {
		return nil, err
	}
	k, err := rt.kernel()
	if err != nil {
		return nil, err
	}
	s := c.Spec
	hide := append(policy.DefaultDenyRead(""), s.Filesystem.DenyRead...)
	var layerBytes int64
	var image *sandbox.RootLayer // with an image's EROFS root
	if l := c.RootLayer; l != nil {
		if l.EROFS != "" {
			image = l
		} else {
			hide = append(append(hide, l.Hide...), l.Remove...)
		}
		layerBytes = l.SizeBytes
	}
	env := c.Environ
	var files []guest.File
	if relayed(c) {
		if files, env, err = netFiles(c, env); err != nil {
			return nil, err
		}
	} else {
		env = sandbox.ProxyEnviron(env, s.Network.Mode)
	}
	if env == nil {
		env = []string{} // the agent's environment is this, not the init's
	}
	cfg := Config{
		Kernel:     k,
		MemoryMiB:  int(s.Resources.MemoryBytes >> 20),
		CPUs:       int(s.Resources.CPUs),
		LayerBytes: layerBytes,
		Self:       true,
		Relay:      relayed(c),
		Boot:       guest.Boot{Env: env, Files: files},
	}
	if image != nil {
		cfg.RootImage, cfg.Workspace = image.EROFS, s.Filesystem.Workspace
		cfg.WorkspaceUID, cfg.WorkspaceGID = image.UID, image.GID
	} else {
		cfg.Share = &Share{LocalWorkspace: s.Filesystem.Workspace, Hide: hide, Virtiofsd: rt.Virtiofsd}
	}
	sb, err := rt.launch(c, cfg, "")
	if err != nil {
		return nil, err
	}
	c.Proxy = nil // the sandbox's now
	return sb, nil
}

// launch starts a VM of cfg for the sandbox of c — booted, or restored
// from the state file state (start) — QEMU under ids of its own (vmIDs) in the sandbox's VM
// directory, and returns the served sandbox: the proxy's relay served in
// network mode "proxy", what a save needs recorded for a guest of an
// image. c.Proxy is the sandbox's once it returns without an error.
func (rt *Runtime) launch(c sandbox.Config, cfg Config, state string) (*served, error) {
	ids, release, err := vmIDs.take()
	if err != nil {
		return nil, err
	}
	log := c.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.Dir, cfg.Init, cfg.AllowEmulation = vmDirOf(c), rt.init(), rt.AllowEmulation
	cfg.UID, cfg.GID, cfg.Log = ids, ids, log
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	vm, err := start(ctx, cfg, state)
	if errors.Is(err, ErrNoAccel) {
		release()
		return nil, noAccelErr()
	}
	if err != nil {
		release()
		return nil, err
	}
	fail := func(err error) (*served, error) {
		vm.Close()
		release()
		return nil, err
	}
	if vm.Emulated() {
		log.Info("microvm: no KVM: the guest runs under software emulation (--allow-emulation), tens of times slower")
	}
	sb := &served{vm: vm, proxy: c.Proxy, release: release, done: make(chan struct{}), log: log}
	if cfg.RootImage != "" {
		if sb.saved, err = savedOf(cfg, vm.Emulated()); err != nil {
			return fail(err)
		}
	}
	if cfg.Relay {
		// A booted guest's first session starts with its relay, the
		// host's end skips to it as it reads; a restored guest may go on
		// with the session it was saved in (serveRelay).
		if state == "" {
			sb.relay, err = serveProxyRelay(vm.RelayConn(), c.Proxy, log)
		} else {
			sb.relay, err = sb.serveRelay(vm.RelayConn())
		}
		if err != nil {
			return fail(err)
		}
	}
	go func() {
		sb.code = vm.ExitCode()
		close(sb.done)
	}()
	return sb, nil
}

// maxHostDir bounds the length of a Config.HostDir that holds the VM's
// directory: the paths of its sockets must fit in a unix socket's address
// (108 bytes).
const maxHostDir = 70

// vmDirOf is the VM's directory for a sandbox of c: microvm in the
// sandbox's directory, removed with it after a crash of hutch's; "" (a
// temporary directory) when that path is too long.
func vmDirOf(c sandbox.Config) string {
	if c.HostDir != "" && len(c.HostDir) <= maxHostDir {
		return filepath.Join(c.HostDir, "microvm")
	}
	return ""
}

// noAccelErr is the tier's refusal on a host without KVM when emulation
// was not allowed.
func noAccelErr() error {
	return fmt.Errorf("tier %q: this host has no hardware virtualization KVM can use (%v); --allow-emulation runs the guest under QEMU's software emulation, tens of times slower", policy.TierMicroVM, usableKVM())
}

// checkStart refuses what Start cannot do: another tier's spec, hutch
// not root, a field the tier refuses (policy.TierRefusals), an image, a
// root layer over an image or from a save or a snapshot, a workspace
// under review, volumes, a sandbox that outlives hutch.
func (rt *Runtime) checkStart(c sandbox.Config) error {
	s := c.Spec
	if err := checkSpec(s); err != nil {
		return err
	}
	var refused []string
	if l := c.RootLayer; l != nil {
		if len(l.Lowers) > 0 && l.EROFS == "" {
			refused = append(refused, "an image as the root without its EROFS root")
		}
		if l.From != "" || l.FromSnapshot != "" {
			refused = append(refused, "a start from a snapshot or a save")
		}
	}
	if c.Image != nil {
		refused = append(refused, "an image as the root")
	}
	if c.ReviewDir != "" {
		refused = append(refused, "a workspace under review")
	}
	if len(c.Volumes) > 0 {
		refused = append(refused, "volumes")
	}
	if c.AgentSocket != "" {
		refused = append(refused, "a sandbox that outlives hutch")
	}
	if len(refused) > 0 {
		return fmt.Errorf("tier %q: not supported in this version: %s", policy.TierMicroVM, strings.Join(refused, ", "))
	}
	if s.Network.Mode == "proxy" && c.Proxy == nil {
		return fmt.Errorf("tier %q: network mode \"proxy\" without hutch's egress proxy", policy.TierMicroVM)
	}
	return nil
}

// served is a long-lived sandbox of the tier: a VM, its relay and its
// proxy.
type served struct {
	vm      *VM
	relayMu sync.Mutex
	relay   *proxyRelay   // nil unless network mode "proxy"; under relayMu
	proxy   sandbox.Proxy // closed with the sandbox; nil for none
	log     *slog.Logger
	release func() // gives QEMU's ids back
	done    chan struct{}
	code    int // QEMU's exit code once done is closed; -1 when killed
	closing atomic.Bool
	once    sync.Once
	saved   savedVM // what Checkpoint records (a guest of an image)
}

var _ sandbox.Instance = (*served)(nil)

// Conn is the connection to the guest's agent.
func (s *served) Conn() net.Conn { return s.vm.Conn() }

// PID is QEMU's host pid: killing it ends the sandbox.
func (s *served) PID() int { return s.vm.PID() }

// Done is closed once QEMU has exited.
func (s *served) Done() <-chan struct{} { return s.done }

// ExitCode is QEMU's exit code (0 when the guest powered off), -1 when
// it was killed.
func (s *served) ExitCode() int {
	<-s.done
	return s.code
}

// Dropped is empty: the tier sets up everything or fails.
func (s *served) Dropped() []string { return nil }

// ExportsLayer is true: the guest's agent exports its root layer, which is
// in the guest's memory (agent.Client.ExportLayer), for snapshots.
func (s *served) ExportsLayer() bool { return true }

// Freeze stops the guest's virtual CPUs (QEMU's monitor: stop).
func (s *served) Freeze() error { return s.vm.Pause() }

// Thaw lets them go on (cont).
func (s *served) Thaw() error { return s.vm.Resume() }

// Close kills QEMU, the guest's virtiofsd processes and the relay, and
// removes the VM's directory.
func (s *served) Close() error {
	var err error
	s.closing.Store(true)
	s.once.Do(func() {
		if r := s.proxyRelay(); r != nil {
			r.Close()
		}
		err = s.vm.Close()
		<-s.done
		if s.proxy != nil {
			_ = s.proxy.Close()
		}
		s.release()
	})
	return err
}

// Usage is what QEMU uses now: its CPU time (the guest's virtual CPUs
// and its devices) and its resident memory, the guest's pages it touched
// included; the virtiofsd processes are not counted.
func (s *served) Usage() (cgroups.Usage, error) {
	pid := s.vm.PID()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return cgroups.Usage{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	f := bytes.Fields(b[i+1:])
	if i < 0 || len(f) < 13 {
		return cgroups.Usage{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	// utime and stime, fields 14 and 15, in clock ticks (USER_HZ, 100).
	utime, err1 := strconv.ParseInt(string(f[11]), 10, 64)
	stime, err2 := strconv.ParseInt(string(f[12]), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return cgroups.Usage{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	m, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return cgroups.Usage{}, err
	}
	mf := strings.Fields(string(m))
	if len(mf) < 2 {
		return cgroups.Usage{}, fmt.Errorf("/proc/%d/statm: malformed", pid)
	}
	resident, err := strconv.ParseInt(mf[1], 10, 64)
	if err != nil {
		return cgroups.Usage{}, fmt.Errorf("/proc/%d/statm: %w", pid, err)
	}
	return cgroups.Usage{CPU: (utime + stime) * int64(time.Second/100), Memory: resident * int64(os.Getpagesize())}, nil
}

// EndReason says why the guest ended on its own ("" while it runs, or
// once Close ended it): QEMU's exit and what the guest's console says
// (a kernel panic, the init's errors).
func (s *served) EndReason() (why string, oom bool) {
	select {
	case <-s.done:
	default:
		return "", false
	}
	if s.closing.Load() {
		return "", false
	}
	return fmt.Sprintf("the guest ended (QEMU's exit code %d; console: %s)", s.code, consoleCause(s.vm.ConsolePath())), false
}

// vmIDs hands each VM of hutch serve host ids of its own for QEMU
// (Config.UID), so that a QEMU a guest took over cannot reach another:
// vmIDBase and up, one of vmIDCount, picked at random among those this
// process does not use (another hutch on the host picks its own).
var vmIDs = &idPool{used: map[int]bool{}}

// The ids of hutch serve's VMs: above the ids the other tiers' sandboxes
// run as (sandbox.RootMappedID and the 65536 after it).
const (
	vmIDBase  = sandbox.RootMappedID + 1<<17
	vmIDCount = 1 << 16
)

type idPool struct {
	mu   sync.Mutex
	used map[int]bool
}

// take returns an id not in use and the function that gives it back.
func (p *idPool) take() (int, func(), error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.used) >= vmIDCount {
		return 0, nil, errors.New("microvm: every id for QEMU is in use")
	}
	id := vmIDBase + rand.IntN(vmIDCount)
	for p.used[id] {
		id = vmIDBase + (id-vmIDBase+1)%vmIDCount
	}
	p.used[id] = true
	var once sync.Once
	return id, func() {
		once.Do(func() {
			p.mu.Lock()
			delete(p.used, id)
			p.mu.Unlock()
		})
	}, nil
}
