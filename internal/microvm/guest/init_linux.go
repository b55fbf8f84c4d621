package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/agent"
)

// portWait bounds how long the guest's init waits for the agent's port to
// appear once the modules are loaded (a slow emulated boot included).
const portWait = 60 * time.Second

// MainIfInit runs InitMain and exits when the process was started as
// "PROGRAM microvm-init": how hutch's binary, and a test binary standing in
// for it, becomes the guest's init.
func MainIfInit() {
	if len(os.Args) >= 2 && os.Args[1] == InitCommand {
		os.Exit(InitMain(os.Args[2:], os.Stderr))
	}
}

// InitMain is `microvm-init`, PID 1 of a microVM: it mounts /proc, /sys,
// devtmpfs on /dev and devpts on /dev/pts, loads the initramfs's modules in their order, opens
// the virtio-serial port PortName once the host end is connected, and
// serves the agent on it. When the connection ends — the host closed it,
// or it failed — or setting up fails, it powers the guest off (PID 1 of a
// kernel may not exit): the VM lives as long as its agent's connection.
// It writes what goes wrong to stderr, the guest's console. Anywhere but
// as PID 1 it refuses with exit code 2.
func InitMain(args []string, stderr io.Writer) int {
	if os.Getpid() != 1 || len(args) != 0 {
		fmt.Fprintf(stderr, "hutch: %s: runs only as the init of hutch's microVM guests\n", InitCommand)
		return 2
	}
	level := slog.LevelInfo
	if os.Getenv(DebugEnv) == "1" {
		level = slog.LevelDebug
	}
	os.Unsetenv(DebugEnv)
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	err := initGuest(log)
	if err != nil {
		log.Error("microvm init", "err", err)
	}
	unix.Sync()
	// The VM ends: power off, or else reset, which QEMU started with
	// -no-reboot turns into its exit.
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
	select {} // unreachable: PID 1 never returns
}

func initGuest(log *slog.Logger) error {
	start := time.Now()
	// devpts on /dev/pts serves the commands' terminals: devtmpfs's
	// /dev/ptmx opens the devpts instance beside it.
	for _, m := range []struct{ fstype, dir, data string }{
		{"proc", "/proc", ""},
		{"sysfs", "/sys", ""},
		{"devtmpfs", "/dev", ""},
		{"devpts", "/dev/pts", "newinstance,ptmxmode=0666,mode=0620,gid=5"},
	} {
		if err := os.MkdirAll(m.dir, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.fstype, m.dir, m.fstype, unix.MS_NOSUID|unix.MS_NOEXEC, m.data); err != nil {
			return fmt.Errorf("mount %s on %s: %w", m.fstype, m.dir, err)
		}
	}
	if err := loadModules(ModuleDir, ModuleOrder); err != nil {
		return err
	}
	// The loopback, in either network mode (the other tiers' "none" is
	// the loopback only too).
	if err := loopbackUp(); err != nil {
		return err
	}
	relayNet := os.Getenv(NetEnv) == NetPortName
	if relayNet || os.Getenv(SelfEnv) == "1" {
		// Before the switch, while the init's binary is in view.
		if err := bindSelf(); err != nil {
			return err
		}
	}
	dir := "/"
	layer := -1 // the root layer's tmpfs, for exportLayer
	if tag := os.Getenv(RootEnv); tag != "" {
		dir = os.Getenv(WorkspaceEnv)
		if !filepath.IsAbs(dir) {
			return fmt.Errorf("%s=%q: not an absolute path", WorkspaceEnv, dir)
		}
		var layerSize int64
		if v := os.Getenv(LayerSizeEnv); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				return fmt.Errorf("%s=%q: not a size in bytes", LayerSizeEnv, v)
			}
			layerSize = n
		}
		var owner [2]int
		if v := os.Getenv(WorkspaceOwnerEnv); v != "" {
			u, g, ok := strings.Cut(v, ":")
			uid, err1 := strconv.Atoi(u)
			gid, err2 := strconv.Atoi(g)
			if !ok || err1 != nil || err2 != nil || uid < 0 || gid < 0 {
				return fmt.Errorf("%s=%q: not UID:GID", WorkspaceOwnerEnv, v)
			}
			owner = [2]int{uid, gid}
		}
		var err error
		if layer, err = switchRoot(tag, dir, layerSize, os.Getenv(LocalWorkspaceEnv) == "1", owner); err != nil {
			return err
		}
		log.Info("microvm init: switched into the shared root", "workspace", dir, "after", time.Since(start))
	}
	os.Unsetenv(RootEnv)
	os.Unsetenv(WorkspaceEnv)
	os.Unsetenv(NetEnv)
	for _, v := range []string{LayerSizeEnv, LocalWorkspaceEnv, SelfEnv, WorkspaceOwnerEnv} {
		os.Unsetenv(v)
	}
	if relayNet {
		if err := startRelay(); err != nil {
			return err
		}
		log.Info("microvm init: relaying the proxy's addresses", "after", time.Since(start))
	}
	port, err := openPort(PortName, portWait)
	if err != nil {
		return err
	}
	log.Info("microvm init: agent port ready", "port", port.Name(), "after", time.Since(start))
	conn := &portConn{f: port}
	if log.Enabled(context.Background(), slog.LevelDebug) {
		stop := make(chan struct{})
		defer close(stop)
		go watchPort(log, conn, stop)
	}
	boot, err := RequestBoot(conn)
	if err != nil {
		return err
	}
	if boot.Time > 0 {
		ts := unix.NsecToTimespec(boot.Time)
		if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
			return fmt.Errorf("set the clock to the host's: %w", err)
		}
	}
	if err := writeFiles(boot.Files); err != nil {
		return err
	}
	env := os.Environ()
	if boot.Env != nil {
		env = boot.Env
	}
	if !hasVar(env, "PATH") {
		env = append(env, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	// An image that ships hutch's sudo (its marker) gets it served, as
	// in the other tiers.
	_, noSudo := os.Lstat(agent.SudoMarker)
	var export func(io.Writer) error
	if layer >= 0 {
		export = func(w io.Writer) error { return exportLayer(layer, w) }
	}
	err = agent.Serve(conn, agent.ServeOptions{
		PID1:       true,
		Log:        log,
		DefaultDir: dir,
		DefaultEnv: env,
		Sudo:       noSudo == nil,
		// Restored from a save, the guest's clock stood still while
		// it was saved: the host's, as it attaches again, is the time.
		SetClock: func(t time.Time) {
			ts := unix.NsecToTimespec(t.UnixNano())
			if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
				log.Warn("microvm init: set the clock to the host's", "err", err)
			}
		},
		// A copy restored from a snapshot's save starts with its
		// source's random pool: the host's bytes make it its own.
		Reseed: func(b []byte) {
			if err := reseed(b); err != nil {
				log.Warn("microvm init: reseed the kernel's random pool", "err", err)
			}
		},
		ExportLayer: export,
	})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	log.Info("microvm init: the host closed the agent's connection")
	return nil
}

// writeFiles writes the files of the host's Boot into the root: each
// replaces what is at its path (a link to systemd-resolved's file, say),
// its directory made when missing.
func writeFiles(files []File) error {
	for _, f := range files {
		if err := os.MkdirAll(filepath.Dir(f.Path), 0o755); err != nil {
			return fmt.Errorf("boot file %s: %w", f.Path, err)
		}
		tmp := f.Path + ".hutch-new"
		if err := os.WriteFile(tmp, f.Data, f.Mode.Perm()); err != nil {
			return fmt.Errorf("boot file %s: %w", f.Path, err)
		}
		if err := os.Chmod(tmp, f.Mode.Perm()); err != nil {
			return fmt.Errorf("boot file %s: %w", f.Path, err)
		}
		if err := os.Rename(tmp, f.Path); err != nil {
			return fmt.Errorf("boot file %s: %w", f.Path, err)
		}
	}
	return nil
}

// hasVar reports whether env sets name.
func hasVar(env []string, name string) bool {
	for _, e := range env {
		if strings.HasPrefix(e, name+"=") {
			return true
		}
	}
	return false
}

// loadModules loads the modules of dir in the order the file order gives,
// one file name a line; one the kernel holds already is skipped.
func loadModules(dir, order string) error {
	b, err := os.ReadFile(order)
	if err != nil {
		return fmt.Errorf("module order: %w", err)
	}
	for _, name := range strings.Fields(string(b)) {
		if err := loadModule(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}

func loadModule(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("load module: %w", err)
	}
	defer f.Close()
	if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("load module %s: %w", path, err)
	}
	return nil
}

// openPort waits up to d for the virtio-serial port called name to appear
// and for the host to connect its end, and opens it.
func openPort(name string, d time.Duration) (*os.File, error) {
	deadline := time.Now().Add(d)
	dev := ""
	for dev == "" {
		names, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, p := range names {
			b, err := os.ReadFile(p)
			if err == nil && strings.TrimSpace(string(b)) == name {
				dev = "/dev/" + filepath.Base(filepath.Dir(p))
			}
		}
		if dev != "" {
			if _, err := os.Stat(dev); err != nil {
				dev = "" // devtmpfs has not made the node yet
			}
		}
		if dev == "" {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("no virtio-serial port %q after %v (ports: %v)", name, d, names)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open agent port: %w", err)
	}
	// Until the host's end is connected, a read of the port returns end of
	// file at once and poll reports a hang-up: wait for the host.
	//
	// The port stays as OpenFile left it, non-blocking and in the
	// runtime's poller, which the agent's reads and writes wait on: never
	// File.Fd, which would make it blocking but leave it in the poller.
	// Then a read blocked in the driver could sleep for good with data
	// waiting: the poller's poll of the port takes what the host sent off
	// the virtqueue, and the interrupt that follows finds nothing new and
	// wakes no one.
	for {
		revents, err := pollFile(f, unix.POLLIN)
		if err != nil && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("poll agent port %s: %w", dev, err)
		}
		if err == nil && revents&unix.POLLHUP == 0 {
			return f, nil
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("agent port %s: the host did not connect within %v", dev, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// portConn is the agent's connection on a virtio-serial port, a character
// device: the net.Conn that agent.Serve takes, over the port's *os.File
// (whose reads and writes go through the runtime's poller, which makes
// Close end a blocked Read).
type portConn struct {
	f *os.File
	// read and written count the bytes through the port, for watchPort.
	read, written atomic.Int64
}

func (c *portConn) Read(b []byte) (int, error) {
	n, err := c.f.Read(b)
	c.read.Add(int64(n))
	return n, err
}

func (c *portConn) Write(b []byte) (int, error) {
	n, err := c.f.Write(b)
	c.written.Add(int64(n))
	return n, err
}

func (c *portConn) Close() error         { return c.f.Close() }
func (c *portConn) LocalAddr() net.Addr  { return portAddr(c.f.Name()) }
func (c *portConn) RemoteAddr() net.Addr { return portAddr("host") }

func (c *portConn) SetDeadline(t time.Time) error      { return c.f.SetDeadline(t) }
func (c *portConn) SetReadDeadline(t time.Time) error  { return c.f.SetReadDeadline(t) }
func (c *portConn) SetWriteDeadline(t time.Time) error { return c.f.SetWriteDeadline(t) }

// portAddr names an end of a virtio-serial port.
type portAddr string

func (a portAddr) Network() string { return "virtio-serial" }
func (a portAddr) String() string  { return string(a) }

// watchPort, in debug mode (DebugEnv), logs every few seconds what the
// driver of c's port received and sent (its debugfs counters: the
// driver counts what it took off the virtqueue) beside what the agent
// read and wrote. When the driver holds bytes the agent has not read, and
// the agent read nothing, for two rounds running, it logs that and the
// init's goroutines, once. It does not poll the port: a poll that takes
// what the host sent off the virtqueue wakes no reader.
func watchPort(log *slog.Logger, c *portConn, stop <-chan struct{}) {
	const debugfs = "/sys/kernel/debug"
	if err := os.MkdirAll(debugfs, 0o755); err == nil {
		if err := unix.Mount("debugfs", debugfs, "debugfs", unix.MS_NOSUID|unix.MS_NOEXEC|unix.MS_NODEV, ""); err != nil {
			log.Debug("microvm init: debugfs", "err", err)
		}
	}
	stats := filepath.Join(debugfs, "virtio-ports", filepath.Base(c.f.Name()))
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	behind, dumped, lastRead := 0, false, int64(-1)
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		st := portStats(stats)
		read, written := c.read.Load(), c.written.Load()
		log.Debug("microvm init: agent port", "driver", st, "agent_read", read, "agent_written", written)
		// Behind: the driver holds bytes and the agent read nothing since
		// the last round.
		if n, err := strconv.ParseInt(st["bytes_received"], 10, 64); err == nil && n > read && read == lastRead {
			behind++
		} else {
			behind = 0
		}
		lastRead = read
		if behind < 2 || dumped {
			continue
		}
		dumped = true
		log.Warn("microvm init: the agent has not read what the port's driver received", "driver", st, "agent_read", read)
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		log.Warn("microvm init: goroutines\n" + string(buf))
	}
}

// portStats returns the fields of a port's debugfs file, "name: value" a
// line.
func portStats(path string) map[string]string {
	m := map[string]string{}
	b, err := os.ReadFile(path)
	if err != nil {
		m["err"] = err.Error()
		return m
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return m
}

// pollFile polls f for events without waiting and returns what it
// reports. It leaves f's mode alone: File.Fd would make it blocking.
func pollFile(f *os.File, events int16) (int16, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var revents int16
	var perr error
	err = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: events}}
		_, perr = unix.Poll(fds, 0)
		revents = fds[0].Revents
	})
	if err != nil {
		return 0, err
	}
	return revents, perr
}
