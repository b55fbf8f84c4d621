package gvisor

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/hostperm"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/relay"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/seccomp"
)

// hostBundle is the bundle of a sandbox whose view is the host's (Run's,
// and Start's without a root layer): its private state directory, the
// view made for it, and what its close undoes.
type hostBundle struct {
	id, dir, state string
	spec           policy.Spec // the spec, its protected paths made (sandbox.Protect)
	v              view
	prot           *sandbox.Protection // nil until made
	mounted        bool                // the writable areas are mounted
	runsc          string
	log            *slog.Logger
}

// close undoes what hostView made: the areas are unmounted before the
// protected paths' placeholders are removed (prot.Finish), which their
// mounts would keep, and the state directory goes last. It returns what
// prot.Finish set aside.
func (h *hostBundle) close() []sandbox.SetAside {
	if h.mounted {
		unmountAreas(h.dir)
	}
	var set []sandbox.SetAside
	if h.prot != nil {
		set = h.prot.Finish()
	}
	cleanup(h.runsc, h.dir, h.id, h.log)
	return set
}

// hostView makes the state directory and the view of a sandbox of c that
// runs args with the host's root, read-only, and its writable areas
// (c.Image's root instead when set). With agent, args are hutch's agent,
// bound at sandbox.SandboxHutch (c.AgentBinary), which relays the proxy
// itself, and are not looked up in the view. On an error the bundle
// returned, when not nil, holds what was made: its close undoes it.
func (rt *Runtime) hostView(c sandbox.Config, args []string, agent bool, log *slog.Logger, warn io.Writer, phase func(string)) (*hostBundle, error) {
	s := c.Spec
	img := c.Image
	base := rt.StateDir
	if base == "" {
		base = DefaultStateDir
	}
	sweep(base, rt.Runsc, log)
	phase("swept")
	id := "hutch-" + sandbox.RandomID()
	dir, err := makePrivateDir(base, id)
	if err != nil {
		return nil, err
	}
	h := &hostBundle{id: id, dir: dir, state: filepath.Join(dir, "state"), runsc: rt.Runsc, log: log}
	phase("state directory")

	// The home: the host's, read-only, with the deny-read paths in it
	// masked ("ro"), or an empty tmpfs ("tmp").
	home := sandbox.EnvHome(c.Environ)
	prot, err := sandbox.Protect(s, home, log)
	if err != nil {
		return h, err
	}
	h.prot = prot
	for _, w := range prot.Warnings {
		fmt.Fprintf(warn, "hutch: warning: %s\n", w)
	}
	s = prot.Spec
	phase("protected")
	var wsStat unix.Stat_t
	if err := unix.Stat(s.Filesystem.Workspace, &wsStat); err != nil {
		return h, fmt.Errorf("workspace %q: %w", s.Filesystem.Workspace, err)
	}
	v := view{args: args, agent: agent, env: c.Environ, uid: wsStat.Uid, gid: wsStat.Gid, prot: prot, image: img}
	if v.workspaceAt, err = sandbox.WorkspaceAt(s, img != nil, prot.Roots); err != nil {
		return h, err
	}
	if img != nil {
		// The image's user; the workspace's owner's files show as theirs.
		v.uid, v.gid = uint32(img.UID), uint32(img.GID)
	} else if home != "" && home != "/" && !inAny(home, prot.Roots) && !within(home, "/tmp") {
		var st unix.Stat_t
		switch {
		case unix.Stat(home, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR:
		case s.Filesystem.Home == "tmp":
			v.home, v.homeTmp = home, true
		case st.Uid != wsStat.Uid:
			// The command runs as the workspace's owner: another user's
			// home would stay closed to it, or show it what is not its own.
			v.home, v.homeTmp = home, true
			fmt.Fprintf(warn, "hutch: note: %s is not the workspace owner's: the sandbox gets an empty home of its own (--home tmp)\n", home)
		}
		// "ro": the home as the host's root shows it, read-only.
	}
	hide := func(p string) bool {
		if inAny(p, prot.Roots) {
			return inAny(p, prot.DenyRead)
		}
		return within(p, "/tmp") || within(p, "/dev/shm") || (v.homeTmp && within(p, v.home)) || inAny(p, prot.DenyRead)
	}
	v.rootfs = filepath.Join(dir, "rootfs")
	if img != nil {
		if err := imageRoot(&v, img); err != nil {
			return h, err // cleanup unmounts it
		}
		hide = func(string) bool { return false }
	}
	if !agent {
		if err := lookPath(args[0], c.Environ, v.lookRoot(), hide); err != nil {
			return h, err
		}
	}
	if img == nil {
		if err := os.Mkdir(v.rootfs, 0o700); err != nil {
			return h, fmt.Errorf("root: %w", err)
		}
		if _, err := sandbox.ReadOnlyHostRoot(v.rootfs); err != nil {
			return h, err // cleanup unmounts it
		}
		// The tier's state directories empty in the copy (the roots of the
		// other sandboxes running now would nest, each in the next), and
		// the host's kernel filesystems dropped.
		if err := trimHostRoot(v.rootfs, base); err != nil {
			return h, err
		}
	}
	phase("root cloned")
	// The writable areas, idmapped: the workspace owner's files show as
	// the command's, what it writes lands as the owner's, and other
	// users' files there stay nobody's. They are mounted on a tmpfs of
	// the bundle's, which is unmounted, never walked, before the bundle
	// is removed.
	if v.areas, err = areaMounts(dir, len(prot.Roots)); err != nil {
		return h, err
	}
	if img == nil {
		// (In an image's view the way to a writable area is made fresh.)
		if v.shadows, err = shadowWays(v.rootfs, prot.Roots); err != nil {
			return h, err
		}
	}
	if err := sandbox.MountIdmapped(prot.Roots, v.areas, areaMap(wsStat.Uid, v.uid), areaMap(wsStat.Gid, v.gid)); err != nil {
		return h, err
	}
	h.mounted = true
	if rt.DirectFS && !agent {
		// gVisor's kernel renames and removes on the host itself, in a
		// mount namespace without the host's mounts, where the host lets
		// it rename or remove a mount point of another namespace (and
		// unmounts it there): gVisor must know every mount point of the
		// areas, the protected paths' and the host's own, to refuse.
		if v.submounts, err = submounts(prot.Roots); err != nil {
			return h, err
		}
	} else if v.onHost, err = prot.MountOver(v.areas); err != nil {
		return h, err
	}
	phase("areas mounted")
	// What the sandbox writes to the host may not grant privilege there
	// (ESCAPES 21): the namespace tier's rules, in gVisor's own filter.
	umask := hostperm.Umask()
	v.umask = uint32(hostperm.SandboxUmask(umask))
	if v.filter, err = ociFilter(seccomp.HostWriteRules(uint32(hostperm.Withheld(umask)))); err != nil {
		return h, err
	}
	v.empty = filepath.Join(dir, "empty")
	if err := os.WriteFile(v.empty, nil, 0o444); err != nil {
		return h, fmt.Errorf("mask file: %w", err)
	}
	if v.special, err = maskSpecial(v.rootfs, v.empty, prot.DenyRead, prot.Roots); err != nil {
		return h, err
	}
	if s.Resources.MemoryBytes > 0 || s.Resources.CPUs > 0 {
		v.cgroup = id
	}
	if agent {
		// The agent is hutch's binary too.
		if err := bindHutch(&v, dir, c.AgentBinary); err != nil {
			return h, err
		}
	}
	if s.Network.Mode == "proxy" {
		// Not for mode "none": its refusing proxy would need runsc's
		// --host-uds=open, which lets gVisor connect to every host socket
		// its view shows that others may write to (as the namespace tier
		// does), where without it gVisor reaches none.
		if !agent {
			if err := bindHutch(&v, dir, rt.Binary); err != nil {
				return h, err
			}
		}
		if err := proxyView(&v, dir, s.Network.Mode, c, img != nil); err != nil {
			return h, err
		}
		if agent {
			// The agent relays the proxy itself (gvisor-init's part).
			v.args = append(v.args, "--relay", relay.SandboxDir)
		}
	}
	h.spec, h.v = s, v
	return h, nil

}

// startHost is Start for a sandbox without a root layer or an image: the
// host's view, as Run makes it (the host's root read-only, the writable
// areas idmapped, the protected paths kept), with hutch's agent as its
// first process, running as the workspace's owner without capabilities as
// Run's command does. Such a sandbox cannot be saved (Checkpoint).
func (rt *Runtime) startHost(c sandbox.Config, log *slog.Logger) (sandbox.Instance, error) {
	if c.RootCaps {
		return nil, fmt.Errorf("tier %q: root's capabilities are for a sandbox with a root layer of its own", policy.TierGVisor)
	}
	warn := c.Warn
	if warn == nil {
		warn = io.Discard
	}
	h, err := rt.hostView(c, []string{sandbox.SandboxHutch, "agent", "--stdin"}, true, log, warn, func(string) {})
	if err != nil {
		if h != nil {
			h.close()
		}
		return nil, err
	}
	v := h.v
	if c.Cgroup || v.cgroup != "" {
		v.cgroup = c.CgroupName
		if v.cgroup == "" {
			v.cgroup = h.id
		}
	}
	sb := &served{runsc: rt.Runsc, dir: h.dir, id: h.id, state: h.state, logFile: filepath.Join(h.dir, "runsc.log"), log: log, proxy: c.Proxy, cgroup: v.cgroup, host: h, warn: warn}
	spec, err := json.MarshalIndent(buildSpec(h.spec, v), "", " ")
	if err == nil {
		err = os.WriteFile(filepath.Join(h.dir, "config.json"), spec, 0o600)
	}
	if err != nil {
		h.close()
		return nil, fmt.Errorf("bundle: %w", err)
	}
	sb.flags = runscArgs(h.state, sb.logFile, v.netDir != "", false, v.cgroup != "")
	if err := sb.launch(append(slices.Clip(sb.flags), "run", "--bundle", h.dir, h.id)); err != nil {
		h.close()
		return nil, err
	}
	return sb, nil
}
