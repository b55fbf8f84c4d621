package gvisor

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/relay"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// serveNet makes dir with the proxy's unix sockets, and serves p on them:
// HTTP and SOCKS5 on stream sockets, DNS on a stream socket whose
// connections carry messages framed as DNS over TCP does. Closing p stops
// them all. The directory (0500) and the sockets (0600) belong to owner,
// the host id of the command's (gVisor's kernel checks the command's
// permission, and its gofer, whose user namespace maps that id, connects):
// no other host user may connect (the state directory's name is in runsc's
// command line), and the sandbox may create nothing there.
func serveNet(dir string, p sandbox.Proxy, owner, group int) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("proxy sockets: %w", err)
	}
	ls, err := listenNet(dir, owner, group)
	if err != nil {
		return err
	}
	err = os.Chown(dir, owner, group)
	if err == nil {
		err = os.Chmod(dir, 0o500)
	}
	if err != nil {
		for _, l := range ls {
			l.Close()
		}
		return fmt.Errorf("proxy sockets: %w", err)
	}
	serveOn(p, ls)
	return nil
}

// serveNetAgain serves p on the sockets of dir, which serveNet made for a
// hutch that is gone: at the same paths, of the same owner.
func serveNetAgain(dir string, p sandbox.Proxy) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("proxy sockets: %w", err)
	}
	for _, name := range []string{relay.HTTPSocket, relay.SOCKSSocket, relay.DNSSocket} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("proxy sockets: %w", err)
		}
	}
	ls, err := listenNet(dir, int(st.Uid), int(st.Gid))
	if err != nil {
		return err
	}
	serveOn(p, ls)
	return nil
}

// listenNet listens on the proxy's sockets in dir, owner's, mode 0600.
func listenNet(dir string, owner, group int) ([3]net.Listener, error) {
	var ls [3]net.Listener
	for i, name := range []string{relay.HTTPSocket, relay.SOCKSSocket, relay.DNSSocket} {
		path := filepath.Join(dir, name)
		l, err := net.Listen("unix", path)
		if err == nil {
			err = os.Chmod(path, 0o600)
		}
		if err == nil {
			err = os.Lchown(path, owner, group)
		}
		if err != nil {
			for _, l := range ls[:i] {
				l.Close()
			}
			if l != nil {
				l.Close()
			}
			return ls, fmt.Errorf("proxy sockets: %w", err)
		}
		ls[i] = l
	}
	return ls, nil
}

// maxDNSConns bounds the relay's DNS connections served at once.
const maxDNSConns = 64

// serveOn serves p on listenNet's listeners.
func serveOn(p sandbox.Proxy, ls [3]net.Listener) {
	go func() { _ = p.ServeHTTP(ls[0]) }()
	go func() { _ = p.ServeSOCKS(ls[1]) }()
	go func() { _ = p.ServeDNS(relay.NewStreamPackets(ls[2], maxDNSConns)) }()
}

// hutchFile is the name of hutch's binary in the state directory: a
// read-only bind of it that gVisor's gofer, with the sandbox's ids, can
// reach.
const hutchFile = "hutch"

// proxyView serves the sandbox's proxy on unix sockets in dir's "net"
// and sets what the view needs to reach it: the sockets' directory,
// hutch's resolv.conf, the proxy's variables and, with a CA bundle, the
// trust bundle. layered says the root is the sandbox's own writable layer
// (a served sandbox), where runsc makes the mount points it lacks; else it
// is the host's, read-only. The first process relays the sandbox's
// 127.0.0.1:3128, :1080 and :53 to the sockets (InitMain, or the agent's
// --relay).
func proxyView(v *view, dir, mode string, c sandbox.Config, layered bool) error {
	v.netDir = filepath.Join(dir, "net")
	if err := serveNet(v.netDir, c.Proxy, sandbox.RootMappedID+int(v.uid), sandbox.RootMappedID+int(v.gid)); err != nil {
		return err
	}
	// Lookups go to 127.0.0.1:53: hutch's resolv.conf over the view's
	// (over what it links to, when it is a link: systemd-resolved's and
	// NetworkManager's are); a view without one needs none. In a layer of
	// the sandbox's own, gVisor resolves the path in the view.
	resolvAt := ""
	if layered {
		resolvAt = resolvConfPath
	} else if t, err := filepath.EvalSymlinks(resolvConfPath); err == nil && filepath.IsAbs(t) {
		if st, err := os.Stat(t); err == nil && st.Mode().IsRegular() {
			resolvAt = t
		}
	}
	if resolvAt != "" {
		v.resolv, v.resolvAt = filepath.Join(dir, "resolv.conf"), resolvAt
		if err := os.WriteFile(v.resolv, []byte(sandbox.ResolvConf), 0o444); err != nil {
			return fmt.Errorf("resolv.conf: %w", err)
		}
	}
	v.env = sandbox.ProxyEnviron(v.env, mode)
	if mode == "proxy" && c.CABundle != "" {
		root := "/"
		if layered {
			root = v.rootfs
		}
		paths, created, env := sandbox.TrustBundle(root, v.env)
		if created && !layered {
			// Its mount point would have to be made in the host's root.
			return fmt.Errorf("tier %q: the host has no bundle of trusted certificates to bind the sandbox's CA over (secrets need one)", policy.TierGVisor)
		}
		v.env = env
		v.bundle, v.bundleAt = c.CABundle, paths
	}
	return nil
}

// bindHutch binds exe (hutch's binary, or the agent's) read-only at
// dir's hutchFile, where gVisor's gofer, whose host ids are the
// sandbox's, can reach it, and sets the view to bind it at
// sandbox.SandboxHutch.
func bindHutch(v *view, dir, exe string) error {
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return fmt.Errorf("hutch's own binary: %w", err)
		}
	}
	v.hutch = filepath.Join(dir, hutchFile)
	if err := os.WriteFile(v.hutch, nil, 0o555); err != nil {
		return fmt.Errorf("hutch's own binary: %w", err)
	}
	if err := unix.Mount(exe, v.hutch, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("hutch's own binary: bind %s: %w", exe, err)
	}
	if err := unix.Mount("", v.hutch, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("hutch's own binary: read-only: %w", err)
	}
	return devMountPoints(v.rootfs)
}

// resolvConfPath is where resolvers read their configuration.
const resolvConfPath = "/etc/resolv.conf"

// devMountPoints makes the mount points of what the view binds into /dev
// in the root's copy: gVisor's gofer binds a mount's source at its
// destination in the root it serves, which must exist there, while the
// command sees gVisor's own /dev with those binds on it. The copy's /dev
// (the host's) becomes an empty read-only tmpfs holding only the mount
// points.
func devMountPoints(rootfs string) error {
	d := filepath.Join(rootfs, "dev")
	if err := os.MkdirAll(d, 0o755); err != nil { // an image may have none
		return fmt.Errorf("/dev's mount points: %w", err)
	}
	if err := unix.Mount("hutch-dev", d, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("/dev's mount points: %w", err)
	}
	for _, sub := range []string{"shm", "pts", "mqueue", filepath.Base(relay.SandboxDir), filepath.Base(agentAt)} {
		if err := os.Mkdir(filepath.Join(d, sub), 0o755); err != nil {
			return fmt.Errorf("/dev's mount points: %w", err)
		}
	}
	// Made without opening it: a file open for writing, even in a child
	// forked meanwhile that has not yet exec'd, would make the read-only
	// remount below fail (EBUSY).
	if err := unix.Mknod(filepath.Join(d, filepath.Base(sandbox.SandboxHutch)), unix.S_IFREG|0o555, 0); err != nil {
		return fmt.Errorf("/dev's mount points: %w", err)
	}
	if err := unix.Mount("", d, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("/dev's mount points: read-only: %w", err)
	}
	return nil
}
