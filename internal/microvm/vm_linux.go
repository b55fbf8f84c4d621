package microvm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/internal/microvm/guest"
	"github.com/hutch-sandbox/hutch/internal/peercred"
)

// ErrNoAccel is wrapped by Boot's error when the host has no hardware
// virtualization KVM can use (usableKVM) and Config.AllowEmulation is
// false.
var ErrNoAccel = errors.New("no hardware virtualization")

// Config is what Boot needs to start a VM.
type Config struct {
	// Kernel is the guest kernel (FindKernel). Required.
	Kernel *Kernel
	// Init is the binary that becomes the guest's /init, run with
	// guest.InitCommand: hutch's own binary, or a test binary that calls
	// MainIfInit. "" means the running program's.
	Init string
	// Initramfs, if set, is an initramfs already built (BuildInitramfs)
	// for Kernel and Init; Boot builds one in the VM's directory otherwise.
	Initramfs string
	// QEMU is the qemu-system-x86_64 to run; "" means the one on PATH.
	QEMU string
	// MemoryMiB is the guest's memory in MiB; 0 means 512.
	MemoryMiB int
	// CPUs is the guest's number of virtual CPUs; 0 means 1.
	CPUs int
	// AllowEmulation lets Boot run the guest under QEMU's software
	// emulation (TCG) when the host has no KVM: many times slower, for
	// hosts without nested virtualization (and tests). Without it Boot
	// fails there with ErrNoAccel.
	AllowEmulation bool
	// UID and GID, when UID is not 0, are the ids QEMU runs as once it
	// has opened its files and before the guest starts (-runas), with an
	// empty directory of the VM's as its root (-chroot): a guest that took
	// QEMU over holds neither root's privileges nor a view of the host's
	// files. Each VM should have ids of its own, so that one QEMU cannot
	// reach another.
	UID, GID int
	// Dir is the directory for the VM's files (its initramfs, the socket
	// of the agent's port, the logs), which must not exist; "" means a new
	// temporary directory. Close removes it.
	Dir string
	// Log receives the VM's events; nil discards them.
	Log *slog.Logger
	// Share, when set, gives the guest the host's system directories as
	// its root and a workspace over virtiofs (root only); without it the
	// guest's root is its initramfs.
	Share *Share
	// RootImage, instead of Share, is an EROFS filesystem image
	// (image.Store.EROFS) that is the guest's root, read-only, from a
	// virtio block device, under a writable layer in the guest's memory;
	// the workspace, Workspace, is a directory of that layer owned by
	// WorkspaceUID and WorkspaceGID. Nothing of the host's is shared: no
	// virtiofsd runs, and QEMU can save the guest's state (Save).
	RootImage                  string
	Workspace                  string
	WorkspaceUID, WorkspaceGID int
	// LayerBytes, with Share or RootImage, bounds the guest root's
	// writable layer (a tmpfs in the guest's memory) to that many bytes;
	// 0 leaves it bounded by the guest's memory only.
	LayerBytes int64
	// Self binds the init's binary at guest.SelfPath in the guest in
	// every network mode (in mode "proxy", with Relay, it is bound
	// always): the helpers hutch serve runs in a sandbox are there.
	Self bool
	// Boot is sent to the guest's init before the agent's protocol
	// starts: the commands' environment and files written into the
	// guest's root.
	Boot guest.Boot
	// Relay gives the guest a second virtio-serial port,
	// guest.NetPortName, on which its init relays the guest's proxy
	// addresses (VM.RelayConn, serveProxyRelay); without it the guest has
	// no such port and listens on none.
	Relay bool
	// Debug makes the guest's init log at debug level on the console and
	// watch the agent's port (guest.DebugEnv).
	Debug bool
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Kernel == nil {
		return errors.New("microvm: no guest kernel")
	}
	if c.MemoryMiB < 0 || c.MemoryMiB != 0 && c.MemoryMiB < 128 {
		return fmt.Errorf("microvm: memory %d MiB is below the minimum of 128", c.MemoryMiB)
	}
	if c.UID < 0 || c.GID < 0 || c.UID == 0 && c.GID != 0 {
		return fmt.Errorf("microvm: QEMU's ids %d:%d (want a uid other than 0 with its gid, or neither)", c.UID, c.GID)
	}
	if c.CPUs < 0 || c.CPUs > 64 {
		return fmt.Errorf("microvm: %d virtual CPUs (want 1 to 64)", c.CPUs)
	}
	if c.RootImage != "" && (c.Share != nil || !filepath.IsAbs(c.Workspace) || c.WorkspaceUID < 0 || c.WorkspaceGID < 0) {
		return errors.New("microvm: a root image needs an absolute workspace path and no shares")
	}
	return nil
}

// VM is a running guest.
type VM struct {
	qemu    *reaped // QEMU under its reaper
	conn    net.Conn
	netConn net.Conn // the relay port's, with Config.Relay
	qmp     *qmp     // QEMU's monitor (QMP)
	dir     string
	console string
	qemuLog string
	emul    bool
	shares  *shareServer
	root    bool // its root is Config.RootImage
	log     *slog.Logger

	done    chan struct{}
	code    int   // QEMU's exit code, -1 when killed, once done is closed
	waitErr error // once done is closed

	closeOnce sync.Once
	closeErr  error
}

// Boot starts a guest and returns once its agent has sent its first bytes
// on the agent's port (the hello): Conn is then the agent's connection. ctx
// bounds the boot only. The guest has no network device; its serial
// console goes to a log file in its directory, whose end Boot's errors
// quote. QEMU and virtiofsd run under reapers (startReaped), which end
// them with the calling process: the running program must dispatch
// ReaperCommand (MainIfReaper), as hutch's binaries do.
func Boot(ctx context.Context, cfg Config) (vm *VM, err error) {
	return start(ctx, cfg, "")
}

// start is Boot, or, with a state file Save wrote, Restore.
func start(ctx context.Context, cfg Config, state string) (vm *VM, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	emul, err := useEmulation(cfg.AllowEmulation)
	if err != nil {
		return nil, err
	}
	qemu := cfg.QEMU
	if qemu == "" {
		if qemu, err = exec.LookPath("qemu-system-x86_64"); err != nil {
			return nil, fmt.Errorf("microvm: QEMU (Debian's package qemu-system-x86, which scripts/guest-kernel.sh installs): %w", err)
		}
	}
	init := cfg.Init
	if init == "" {
		if init, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("microvm: the guest's init: %w", err)
		}
	}
	dir := cfg.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "hutch-microvm-"); err != nil {
			return nil, fmt.Errorf("microvm: %w", err)
		}
	} else if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("microvm: %w", err)
	}
	v := &VM{
		dir:     dir,
		console: filepath.Join(dir, "console.log"),
		qemuLog: filepath.Join(dir, "qemu.log"),
		emul:    emul,
		root:    cfg.RootImage != "",
		log:     cfg.Log,
		done:    make(chan struct{}),
	}
	if v.log == nil {
		v.log = slog.New(slog.DiscardHandler)
	}
	defer func() {
		if err != nil {
			v.Close()
		}
	}()
	start := time.Now()
	initramfs := cfg.Initramfs
	if initramfs == "" {
		initramfs = filepath.Join(dir, "initramfs.cpio")
		if err := BuildInitramfs(initramfs, init, cfg.Kernel); err != nil {
			return nil, err
		}
		v.log.Debug("microvm: initramfs built", "path", initramfs, "took", time.Since(start))
	}
	sock := filepath.Join(dir, "agent.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("microvm: agent socket: %w", err)
	}
	defer l.Close()
	netSock := ""
	var netL *net.UnixListener
	if cfg.Relay {
		netSock = filepath.Join(dir, "net.sock")
		if netL, err = net.ListenUnix("unix", &net.UnixAddr{Name: netSock, Net: "unix"}); err != nil {
			return nil, fmt.Errorf("microvm: relay socket: %w", err)
		}
		defer netL.Close()
	}
	qmpSock := filepath.Join(dir, "qmp.sock")
	qmpL, err := net.ListenUnix("unix", &net.UnixAddr{Name: qmpSock, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("microvm: QMP socket: %w", err)
	}
	defer qmpL.Close()

	qlog, err := os.OpenFile(v.qemuLog, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("microvm: %w", err)
	}
	defer qlog.Close()
	var socks map[string]string
	if cfg.Share != nil {
		if err := cfg.Share.check(); err != nil {
			return nil, err
		}
		if v.shares, err = startShares(cfg.Share, dir); err != nil {
			return nil, err
		}
		socks = v.shares.socks
		v.log.Debug("microvm: virtiofsd started", "took", time.Since(start))
	}
	args := qemuArgs(cfg, emul, initramfs, sock, netSock, qmpSock, v.console, socks)
	if state != "" {
		// The guest's state comes over the monitor (restoreState).
		args = append(args, "-incoming", "defer")
	}
	if cfg.UID != 0 {
		root := filepath.Join(dir, "root")
		if err := os.Mkdir(root, 0o555); err != nil {
			return nil, fmt.Errorf("microvm: %w", err)
		}
		args = append(args, "-runas", fmt.Sprintf("%d:%d", cfg.UID, cfg.GID), "-chroot", root)
	}
	c := exec.Command(qemu, args...)
	c.Stdout, c.Stderr = qlog, qlog
	// QEMU dies with hutch (S4) through its reaper (startReaped), which
	// removes the VM's directory if hutch ended first.
	q, waited, err := startReapedThread(c, dir)
	if err != nil {
		return nil, fmt.Errorf("microvm: start QEMU: %w", err)
	}
	v.qemu = q
	started := time.Now()
	v.log.Debug("microvm: QEMU started", "pid", v.qemu.pid, "emulation", emul, "dir", dir)
	go func() {
		<-waited
		v.code = v.qemu.exitCode()
		switch v.code {
		case 0:
		case -1:
			v.waitErr = errors.New("QEMU was killed")
		default:
			v.waitErr = fmt.Errorf("QEMU exited with code %d", v.code)
		}
		close(v.done)
	}()

	// QEMU connects the ports' character devices to their sockets as it
	// starts; the guest's agent speaks once it is up.
	agentCh := v.acceptQEMU(l)
	qmpCh := v.acceptQEMU(qmpL)
	var netCh <-chan accepted
	if netL != nil {
		netCh = v.acceptQEMU(netL)
	}
	conn, err := v.awaitQEMU(ctx, agentCh, "agent's")
	if err != nil {
		return nil, err
	}
	if state != "" {
		return v.restoreState(ctx, conn, qmpCh, netCh, state)
	}
	// The boot message goes first, once the guest's init asks for it (so
	// that the clock it carries is the host's as the guest reads it); the
	// guest reads it all before its agent speaks.
	br := bufio.NewReaderSize(conn, 64<<10)
	booted, ready := make(chan error, 1), make(chan error, 1)
	go func() {
		err := guest.AnswerBoot(br, conn, cfg.Boot)
		booted <- err
		if err != nil {
			ready <- nil // the boot error says it
			return
		}
		_, err = br.Peek(1)
		ready <- err
	}()
	qc, err := v.awaitQEMU(ctx, qmpCh, "monitor's")
	if err != nil {
		conn.Close()
		return nil, err
	}
	v.qmp = newQMP(qc)
	if netCh != nil {
		if v.netConn, err = v.awaitQEMU(ctx, netCh, "relay's"); err != nil {
			conn.Close()
			return nil, err
		}
	}
	v.conn = &bufConn{Conn: conn, r: br}
	select {
	case err := <-ready:
		if err := <-booted; err != nil {
			return nil, v.bootErr(fmt.Sprintf("the guest's boot message: %v", err))
		}
		if err != nil {
			return nil, v.bootErr(fmt.Sprintf("the guest's agent did not speak: %v", err))
		}
		v.log.Info("microvm: guest agent ready", "pid", v.qemu.pid, "emulation", emul, "boot", time.Since(started), "total", time.Since(start))
	case <-ctx.Done():
		return nil, v.bootErr(fmt.Sprintf("boot: %v", ctx.Err()))
	}
	return v, nil
}

// accepted is a connection to a port's socket, or why there is none.
type accepted struct {
	c   net.Conn
	err error
}

// acceptQEMU accepts QEMU's connection on l. A connection from any other
// process (the socket's directory is the VM's, private) is closed: only
// QEMU's may become a port's.
func (v *VM) acceptQEMU(l *net.UnixListener) <-chan accepted {
	ch := make(chan accepted, 1)
	go func() {
		for {
			c, err := l.AcceptUnix()
			if err != nil {
				ch <- accepted{nil, err}
				return
			}
			p, err := peercred.Of(c)
			if err == nil && p.PID == v.qemu.pid {
				ch <- accepted{c, nil}
				return
			}
			v.log.Warn("microvm: a connection to a port's socket not from QEMU closed", "socket", l.Addr(), "peer", p, "err", err)
			c.Close()
		}
	}()
	return ch
}

// awaitQEMU waits for acceptQEMU's connection of the port named in
// errors by what.
func (v *VM) awaitQEMU(ctx context.Context, ch <-chan accepted, what string) (net.Conn, error) {
	select {
	case a := <-ch:
		if a.err != nil {
			return nil, fmt.Errorf("microvm: accept QEMU's connection to the %s port: %w", what, a.err)
		}
		v.log.Debug("microvm: QEMU connected the "+what+" port", "pid", v.qemu.pid)
		return a.c, nil
	case <-v.done:
		return nil, v.bootErr("QEMU ended before it connected the " + what + " port")
	case <-ctx.Done():
		return nil, v.bootErr(fmt.Sprintf("boot: %v", ctx.Err()))
	}
}

// useEmulation tells whether the guest must run under TCG: when this
// host's KVM cannot run it (usableKVM), if allowed.
func useEmulation(allow bool) (bool, error) {
	err := usableKVM()
	if err == nil {
		return false, nil
	}
	if allow {
		return true, nil
	}
	return false, fmt.Errorf("microvm: %w: %w (software emulation, many times slower, is allowed only explicitly)", ErrNoAccel, err)
}

// qemuArgs is QEMU's command line: the microvm machine without default
// devices, option ROMs or network, under QEMU's seccomp filter; the
// kernel, the initramfs and the kernel's command line that makes the
// initramfs's /init hutch's init; the serial console to a file; one
// virtio-serial port, guest.PortName, whose character device is QEMU's
// connection to the socket sock.
//
// With shares (tag → vhost-user socket), the guest's memory is a shared
// memfd, which virtiofsd maps, and each share is a vhost-user-fs device
// of its tag; the kernel's command line tells the init to switch into the
// root share (guest.RootEnv) and where the workspace goes.
func qemuArgs(cfg Config, emul bool, initramfs, sock, netSock, qmpSock, console string, shares map[string]string) []string {
	mem, cpus := cfg.MemoryMiB, cfg.CPUs
	if mem == 0 {
		mem = 512
	}
	if cpus == 0 {
		cpus = 1
	}
	accel, cpu := "kvm", "host"
	// panic=-1 turns a kernel panic into a reset, which -no-reboot turns
	// into QEMU's exit.
	cmdline := []string{"console=ttyS0", "panic=-1", "quiet", "pci=off"}
	if emul {
		// TCG's TSC is not calibrated against a PIT the cloud kernel
		// trusts: without a given frequency it hangs calibrating.
		accel, cpu = "tcg", "max"
		// The counter is the host's, constant: the guest's watchdog,
		// whose reference is jiffies that a busy host loses under
		// emulation, would take it for unstable and fall back to
		// jiffies, and the guest's clock would lose a third of its time.
		cmdline = append(cmdline, fmt.Sprintf("tsc_early_khz=%d", emulatedTSCkHz(cfg.Log)), "tsc=reliable", "clocksource=tsc")
	}
	if cfg.Debug {
		cmdline = append(cmdline, guest.DebugEnv+"=1")
	}
	if shares != nil {
		cmdline = append(cmdline, guest.RootEnv+"="+rootTag, guest.WorkspaceEnv+"="+cfg.Share.guestWorkspace())
		if cfg.Share.Workspace == "" {
			cmdline = append(cmdline, guest.LocalWorkspaceEnv+"=1")
		}
	}
	var drives []string
	if cfg.RootImage != "" {
		cmdline = append(cmdline, guest.RootEnv+"="+guest.RootBlock, guest.WorkspaceEnv+"="+cfg.Workspace, guest.LocalWorkspaceEnv+"=1",
			fmt.Sprintf("%s=%d:%d", guest.WorkspaceOwnerEnv, cfg.WorkspaceUID, cfg.WorkspaceGID))
		drives = []string{"-drive", "if=none,id=root,format=raw,readonly=on,file=" + qemuOptValue(cfg.RootImage),
			"-device", "virtio-blk-device,drive=root"}
	}
	if (shares != nil || cfg.RootImage != "") && cfg.LayerBytes > 0 {
		cmdline = append(cmdline, guest.LayerSizeEnv+"="+strconv.FormatInt(cfg.LayerBytes, 10))
	}
	if cfg.Self {
		cmdline = append(cmdline, guest.SelfEnv+"=1")
	}
	ports := []string{
		"-chardev", "socket,id=agent,path=" + sock,
		"-device", "virtserialport,chardev=agent,name=" + guest.PortName,
	}
	if netSock != "" {
		cmdline = append(cmdline, guest.NetEnv+"="+guest.NetPortName)
		ports = append(ports, "-chardev", "socket,id=net,path="+netSock,
			"-device", "virtserialport,chardev=net,name="+guest.NetPortName)
	}
	cmdline = append(cmdline, "--", guest.InitCommand)
	// QEMU's own seccomp filter: no obsolete system calls, no set-id or
	// capability changes, no fork or exec, no scheduler or priority
	// changes, should the guest take QEMU over. QEMU installs it before it
	// changes its ids for -runas, which needs setuid and setgid: then
	// those are allowed, harmless once QEMU is no longer root.
	elevate := "deny"
	if cfg.UID != 0 {
		elevate = "allow"
	}
	sandbox := "on,obsolete=deny,elevateprivileges=" + elevate + ",spawn=deny,resourcecontrol=deny"
	machine := "microvm,x-option-roms=off,isa-serial=on,rtc=on"
	var fs []string
	if shares != nil {
		machine += ",memory-backend=mem"
		// virtiofsd's vhost-user library serves only virtio 1.0 devices,
		// which virtio-mmio is not by default.
		fs = append(fs, "-object", fmt.Sprintf("memory-backend-memfd,id=mem,size=%dM,share=on", mem),
			"-global", "virtio-mmio.force-legacy=false")
		for _, tag := range []string{rootTag, workspaceTag} {
			if shares[tag] == "" {
				continue // the guest's own workspace
			}
			fs = append(fs, "-chardev", "socket,id=fs-"+tag+",path="+shares[tag],
				"-device", "vhost-user-fs-device,chardev=fs-"+tag+",tag="+tag)
		}
	}
	return append([]string{
		"-M", machine,
		"-accel", accel,
		"-cpu", cpu,
		"-m", strconv.Itoa(mem),
		"-smp", strconv.Itoa(cpus),
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
		"-sandbox", sandbox,
		"-serial", "file:" + console,
		"-kernel", cfg.Kernel.Image,
		"-initrd", initramfs,
		"-append", strings.Join(cmdline, " "),
		// Port 0 is kept for a console: one more than the ports.
		"-device", fmt.Sprintf("virtio-serial-device,max_ports=%d", 1+len(ports)/4),
		// QEMU's monitor, whose connection hutch accepts as the ports'
		// (Pause, Resume).
		"-chardev", "socket,id=qmp,path=" + qmpSock,
		"-mon", "chardev=qmp,mode=control",
	}, slices.Concat(ports, fs, drives)...)
}

// qemuOptValue is s as the value of a QEMU option: its commas doubled.
func qemuOptValue(s string) string { return strings.ReplaceAll(s, ",", ",,") }

// bootErr is err about a boot that failed, with the end of QEMU's output
// and what the guest's console says about it.
func (v *VM) bootErr(msg string) error {
	fs := ""
	if v.shares != nil {
		for _, tag := range []string{rootTag, workspaceTag} {
			fs += fmt.Sprintf("; virtiofsd %s: %s", tag, tail(filepath.Join(v.dir, "virtiofsd-"+tag+".log"), 400))
		}
	}
	return fmt.Errorf("microvm: %s (QEMU: %s%s; console: %s)", msg, tail(v.qemuLog, 400), fs, consoleCause(v.console))
}

// consoleCause returns what the guest's console at path says about a
// failure: the kernel's panic line, else the errors of hutch's init, else
// the console's end.
func consoleCause(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var errs []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if _, rest, ok := strings.Cut(line, "Kernel panic - "); ok {
			return "Kernel panic - " + rest
		}
		if strings.Contains(line, "level=ERROR") {
			errs = append(errs, line)
		}
	}
	if len(errs) > 0 {
		return strings.Join(errs, "; ")
	}
	return tail(path, 1200)
}

// tail returns the last n bytes of the file at path, on one line.
func tail(path string, n int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if int64(len(b)) > n {
		b = b[int64(len(b))-n:]
	}
	s := strings.Join(strings.Fields(strings.ReplaceAll(string(b), "\r", "")), " ")
	if s == "" {
		return "nothing"
	}
	return s
}

// Conn is the connection to the guest's agent, from which an agent.Client
// is made (agent.NewClient). Closing it makes the guest power off.
func (v *VM) Conn() net.Conn { return v.conn }

// RelayConn is the connection of the relay's port (Config.Relay), nil
// without it: serveProxyRelay serves the guest's streams on it.
func (v *VM) RelayConn() net.Conn { return v.netConn }

// Done is closed once QEMU has exited.
func (v *VM) Done() <-chan struct{} { return v.done }

// Err is how QEMU exited once Done is closed, nil before and when it
// exited with code 0.
func (v *VM) Err() error {
	select {
	case <-v.done:
		return v.waitErr
	default:
		return nil
	}
}

// ExitCode is QEMU's exit code once Done is closed (0 when the guest
// powered off), -1 when it was killed (by Close, say).
func (v *VM) ExitCode() int {
	<-v.done
	return v.code
}

// PID is QEMU's host process id.
func (v *VM) PID() int { return v.qemu.pid }

// Emulated reports whether the guest runs under software emulation.
func (v *VM) Emulated() bool { return v.emul }

// Dir is the VM's directory.
func (v *VM) Dir() string { return v.dir }

// ConsolePath is the file the guest's serial console goes to, in Dir.
func (v *VM) ConsolePath() string { return v.console }

// Close kills QEMU, waits for it to exit and removes the VM's directory.
func (v *VM) Close() error {
	v.closeOnce.Do(func() {
		if v.conn != nil {
			v.conn.Close()
		}
		if v.netConn != nil {
			v.netConn.Close()
		}
		if v.qmp != nil {
			v.qmp.conn.Close()
		}
		if v.qemu != nil {
			// QEMU's reaper, and so QEMU.
			v.qemu.cmd.Process.Kill()
			select {
			case <-v.done:
				v.qemu.close()
			case <-time.After(30 * time.Second):
				v.closeErr = fmt.Errorf("microvm: QEMU (pid %d) did not exit after SIGKILL", v.qemu.pid)
				return
			}
		}
		if v.shares != nil {
			v.shares.close()
		}
		if err := os.RemoveAll(v.dir); err != nil {
			v.closeErr = fmt.Errorf("microvm: %w", err)
		}
	})
	return v.closeErr
}

// bufConn is a connection whose reads go through r, which holds what Boot
// peeked at.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }
