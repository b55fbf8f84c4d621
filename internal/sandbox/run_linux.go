package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/cgroups"
	"github.com/hutch-sandbox/hutch/internal/hostperm"
	"github.com/hutch-sandbox/hutch/internal/landlock"
	"github.com/hutch-sandbox/hutch/internal/policy"
)

// RootMappedID is the host uid and gid the sandbox runs as when root starts
// it (S1): an id no host file or process owns. Writable paths are mounted
// idmapped so that the sandbox's writes land on the host owned by the
// workspace's owner.
const RootMappedID = 1_000_000_000

// launch starts a sandbox: for Run, with c.Args as its command; for Start
// (agent is the sandbox's end of the agent connection), with hutch's agent
// as its PID 1. On success the caller owns l and must close it; on error
// everything launch made is gone.
func launch(c Config, agent *os.File) (l *launched, err error) {
	l = &launched{master: -1, pidfd: -1, warn: c.Warn, log: c.Log}
	if err := checkTier(c.Spec); err != nil {
		return l, err
	}
	defer func() {
		if err != nil {
			l.close()
		}
	}()
	res := l
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Warn == nil {
		c.Warn = io.Discard
	}
	s := c.Spec
	layer := c.RootLayer
	// A root layer's workspace is a directory of the view, but in review
	// mode: the host directory under review (Spec.Filesystem.Workspace),
	// shown at Spec.Filesystem.WorkspaceAt (at its host path when that is
	// empty), whose writes go to the change set only.
	reviewed := layer != nil && c.ReviewDir != ""
	if layer == nil || reviewed {
		// The host-side steps (placeholders, the git scan, setting aside)
		// reach the writable areas without following any symbolic link,
		// so that the sandbox cannot redirect them; a workspace reached
		// through one is taken by its real path.
		if err := realPaths(&s); err != nil {
			return res, err
		}
	}
	ws := s.Filesystem.Workspace
	t0 := time.Now()
	phase := func(name string) { c.Log.Debug("sandbox setup", "phase", name, "at", time.Since(t0)) }

	asRoot := os.Geteuid() == 0
	if layer != nil {
		if !asRoot {
			return res, errors.New("a writable root layer needs hutch to run as root")
		}
		if layer.SizeBytes <= 0 {
			return res, errors.New("a writable root layer needs a size")
		}
		if min(layer.UID, layer.GID) < 0 || max(layer.UID, layer.GID) >= layerIDs {
			return res, fmt.Errorf("the workspace's owner %d:%d: a root layer maps ids 0–%d only", layer.UID, layer.GID, layerIDs-1)
		}
	}
	if len(c.Volumes) > 0 {
		if layer == nil {
			return res, errors.New("volumes need a writable root layer")
		}
		if err := CheckVolumes(c.Volumes, ws); err != nil {
			return res, err
		}
	}
	img := c.Image
	if img != nil {
		switch {
		case layer != nil:
			return res, errors.New("a sandbox from an image takes no other root layer")
		case len(img.Layers) == 0:
			return res, errors.New("an image without layers")
		case img.SizeBytes <= 0:
			return res, errors.New("a sandbox from an image needs a size for what it writes to its root")
		}
	}
	var wsStat unix.Stat_t // the workspace's owner becomes the inside identity
	if layer == nil {
		if err := unix.Stat(ws, &wsStat); err != nil {
			return res, fmt.Errorf("workspace %q: %w", ws, err)
		}
	}

	// Identity (S1).
	innerUID, innerGID := os.Getuid(), os.Getgid()
	hostUID, hostGID := innerUID, innerGID
	nids := 1
	if asRoot {
		innerUID, innerGID = int(wsStat.Uid), int(wsStat.Gid)
		hostUID, hostGID = RootMappedID, RootMappedID
	}
	if layer != nil || (img != nil && asRoot) {
		// The root's files keep their owners' ids, 0–65535, in the
		// sandbox (an idmapped mount).
		nids = layerIDs
	}
	mapUID, mapGID := innerUID, innerGID // the first inner ids of the maps
	var groups []int
	if img != nil {
		// The image's user (root when it names none). Root: the image's
		// ids 0–65535 are mapped, the writable areas idmapped so that
		// their owner's files are the user's; an ordinary user: the one
		// id there is becomes the image user's, and every file of the
		// image and the workspace shows as theirs.
		innerUID, innerGID = img.UID, img.GID
		mapUID, mapGID = innerUID, innerGID
		if asRoot {
			mapUID, mapGID, groups = 0, 0, img.Groups
			for _, id := range append([]int{img.UID, img.GID}, img.Groups...) {
				if id < 0 || id >= layerIDs {
					return res, fmt.Errorf("the image's user: id %d: hutch maps the image's ids 0–%d only", id, layerIDs-1)
				}
			}
		}
	}
	var keepCaps []int
	if c.RootCaps {
		if layer == nil {
			return res, errors.New("root capabilities need a writable root layer")
		}
		keepCaps = rootCapNumbers()
	}

	cfg := initConfig{
		Args:       c.Args,
		Env:        c.Environ,
		Dir:        ws,
		Root:       s.Root,
		TmpBytes:   s.Resources.TmpBytes,
		Hostname:   Hostname,
		BestEffort: s.BestEffort,
		Missing:    simulatedMissing(),
		DenyRead:   s.Filesystem.DenyRead,
		AllowRead:  s.Filesystem.AllowRead,
		Net:        s.Network.Mode,
		AgentFD:    -1,
		RootLayer:  -1,
		HomeLayer:  -1,
		MasksLayer: -1,
		KeepCaps:   keepCaps,
	}
	if agent != nil {
		cfg.AgentFD = int(agent.Fd())
		cfg.Args = []string{"hutch", "agent"}
		if c.AgentSocket != "" {
			// Descriptor 3 is a listener (see Config.AgentSocket).
			cfg.Args = append(cfg.Args, "--accept")
			cfg.Env = append(withoutVars(cfg.Env, []string{AgentTokenEnv}), AgentTokenEnv+"="+c.AgentToken)
		}
	}
	if cfg.Net == "proxy" || agent != nil {
		// hutch's own binary: ssh's ProxyCommand, and the agent.
		exe, err := os.Executable()
		if err != nil {
			return res, fmt.Errorf("hutch's own binary: %w", err)
		}
		if agent != nil && c.AgentBinary != "" {
			exe = c.AgentBinary
		}
		cfg.Files = append(cfg.Files, fileBind{Path: exe, Target: SandboxHutch, Create: true, Exec: true})
	}
	if c.BootID != "" {
		cfg.Files = append(cfg.Files, fileBind{Path: c.BootID, Target: BootIDPath})
	}
	if cfg.Net == "proxy" && c.Proxy == nil {
		return res, errors.New("network mode proxy needs an egress proxy")
	}
	cfg.Listen = c.Proxy != nil && (cfg.Net == "proxy" || cfg.Net == "none")
	if cfg.Net == "none" && c.Proxy != nil {
		// A proxy that refuses everything: clients that use it fail at
		// once, and say where they meant to go. ssh needs hutch's binary
		// to use it; without, it fails at its name lookup.
		l.onLoose(func() { _ = c.Proxy.Close() })
		cfg.Env = append(withoutVars(cfg.Env, proxyEnvVars), proxyEnv(false)...)
	}
	if cfg.Net == "proxy" {
		l.onLoose(func() { _ = c.Proxy.Close() })
		cfg.Env = append(withoutVars(cfg.Env, proxyEnvVars), ProxyEnv()...)
		if c.CABundle != "" {
			root := s.Root
			if img != nil {
				root = img.Layers[len(img.Layers)-1] // where an image keeps its bundle, mostly
			}
			targets, env := trustBundleTargets(root)
			for _, t := range targets {
				cfg.Files = append(cfg.Files, fileBind{Path: c.CABundle, Target: t.path, Create: t.create})
			}
			cfg.Env = append(withoutVars(cfg.Env, trustEnvVars), env...)
		}
	}
	if cfg.Missing["userns"] {
		return res, fmt.Errorf("create sandbox namespaces: %w: user namespaces are not available (simulated by %s)", ErrKernelFeature, SimulateMissingEnv)
	}
	var roots []string // nothing of the host's is writable with a root layer,
	switch {
	case layer == nil:
		roots = writableRoots(s)
	case reviewed:
		// but the workspace under review, through its change set.
		roots = []string{ws}
	}
	// Most default deny-read paths do not exist on a given machine: drop
	// those here, with a listing per directory, rather than let every
	// later step look each up.
	if cfg.Net != "host" {
		// The host's resolver daemons answer over unix sockets, which no
		// network namespace separates: through them the sandbox could
		// resolve names, and send them out, on the host's network (S6).
		s.Filesystem.DenyRead = append(slices.Clip(s.Filesystem.DenyRead), resolverSockets...)
	}
	s.Filesystem.DenyRead = withAliases(s.Filesystem.DenyRead)
	s.Filesystem.DenyRead = presentOrOwn(s.Filesystem.DenyRead, append(slices.Clone(ownFilesystems), roots...), envHome(c.Environ))
	cfg.DenyRead = s.Filesystem.DenyRead
	homeBuild := false // hutch builds the home's overlay (root)
	if layer == nil && img == nil {
		var note string
		homeBuild, note, err = setHome(&cfg, s, c.Environ, roots, asRoot, int(wsStat.Uid), int(wsStat.Gid))
		if err != nil {
			return res, err
		}
		if note != "" {
			fmt.Fprintf(c.Warn, "hutch: note: %s\n", note)
		}
	}
	if img == nil && layer == nil {
		// (In an image's view, or a root layer, the way to a writable
		// area is made fresh.)
		cfg.Shadows = shadows(roots, sandboxIdentity(asRoot), cfg.PrivateHome, cfg.Home)
	}
	for _, r := range roots {
		cfg.Writable = append(cfg.Writable, bindSrc{Path: r, FD: -1})
	}
	switch {
	case c.ReviewDir != "":
		owner := [2]int{RootMappedID, RootMappedID}
		if layer != nil {
			owner = [2]int{RootMappedID + layer.UID, RootMappedID + layer.GID}
		}
		if err := review(&cfg, c.ReviewDir, ws, owner, asRoot); err != nil {
			return res, err
		}
	case s.Filesystem.WorkspaceMode == policy.WorkspaceReview:
		// Fail closed: a front end that keeps no change set must not
		// let the sandbox write the user's files instead (S2).
		return res, errors.New("filesystem.workspace_mode review: this front end keeps no change set; review mode is hutch run --review's in this version")
	}
	if err := placeWorkspace(&cfg, s, img, reviewed, roots); err != nil {
		return res, err
	}
	layerWS := ws // the workspace's path in a root layer
	if reviewed {
		layerWS = cfg.Workspace.of(ws)
		reviewedLayer, err := reviewLayerRoot(*layer, rootDir(s.Root), ws, layerWS, c.ReviewDir, effectiveDenyRead(cfg.DenyRead, cfg.AllowRead))
		if err != nil {
			return res, err
		}
		layer = &reviewedLayer
	}
	if len(cfg.Writable) > 0 && layer == nil {
		// What the sandbox writes there must not grant or widen privilege
		// on the host (ESCAPES 21). (A root layer's change set reaches
		// the host only through package changes, which applies the same
		// rule: the sandbox's own root keeps every mode.)
		umask := hostperm.Umask()
		cfg.HostWrites = true
		cfg.Umask, cfg.Withheld = uint32(hostperm.SandboxUmask(umask)), uint32(hostperm.Withheld(umask))
	}

	// Signals that arrive while the sandbox starts are forwarded once it
	// runs; none may kill hutch and leave the sandbox to its Pdeathsig.
	if agent == nil {
		l.sigs = make(chan os.Signal, 8)
		signal.Notify(l.sigs, forwardedSignals...)
		l.onClose(func() { signal.Stop(l.sigs) })
	}

	// Terminal: the sandbox opens a pty in its own devpts and sends back
	// the master.
	if agent == nil && isTerminal(c.Stdin) {
		cfg.Tty = true
		if ws, err := unix.IoctlGetWinsize(int(c.Stdin.Fd()), unix.TIOCGWINSZ); err == nil {
			cfg.Rows, cfg.Cols = ws.Row, ws.Col
		}
	}
	// Else the command's streams are c's: hutch's own for hutch run,
	// pipes for hutch mcp wrap.
	if agent == nil && !cfg.Tty {
		cfg.Streams = streamFDs(c.Stdin, c.Stdout, c.Stderr)
	}

	group, rlimits, dropped, err := limits(s.Resources, s.BestEffort, c.Cgroup, c.CgroupName)
	if err != nil {
		return res, err
	}
	cfg.Rlimits = rlimits
	cgroupFD := -1
	if group != nil {
		if fd, ok := group.FD(); ok {
			cgroupFD = fd
		}
	}

	if agent == nil && layer == nil && !cfg.Missing["fuse"] {
		// What the sandbox tries at the masks and placeholders is reported
		// at its end (hutch serves them); without FUSE they refuse all the
		// same, unseen. Root: the mount is made while the host side is
		// prepared. An ordinary user: the sandbox's first process mounts
		// them and hands them over.
		uid, gid := uint32(hostUID), uint32(hostGID)
		if !asRoot {
			// Ids as the sandbox's user namespace, where its first
			// process mounts them, sees them.
			uid, gid = uint32(innerUID), uint32(innerGID)
		}
		si := startStandIns(uid, gid, !asRoot)
		l.standIns = si
		l.onClose(si.close)
	}
	// The host side: placeholders and the Landlock ruleset.
	home := envHome(c.Environ)
	if cfg.PrivateHome != "" {
		home = "" // replaced by a private tmpfs: nothing there to protect
	}
	protect := func() protection { return protection{} }
	if layer == nil || reviewed {
		// Deny-write paths keep a sandbox from planting code that the
		// host's user runs next; with a root layer nothing it writes
		// outlives it but a change set under review, which a person
		// applies to the workspace (its home is the layer's own).
		if layer != nil {
			home = ""
		}
		protect = func() protection { return protectedPaths(s, roots, home) }
	}
	p := prepare(s, protect, roots, asRoot, layer != nil || img != nil, cfg.Missing)
	prot := p.prot
	if layer == nil || reviewed {
		l.after = &aftercare{git: prot.git, created: prot.created, whys: prot.whys, placeholders: p.placeholders.kinds()}
		if prot.git != nil && prot.git.truncated {
			fmt.Fprintf(c.Warn, "hutch: warning: the writable areas hold more than %d directories (or deeper than %d): git repositories beyond them are neither protected nor checked; run hutch in the project's own directory\n", maxScanDirs, maxScanDepth)
		}
	}
	p.group = group
	l.group = group
	l.onClose(func() { p.cleanup(c.Log) })
	if p.err != nil {
		return res, p.err
	}
	phase("host side prepared")
	if p.ruleset == nil {
		if !s.BestEffort {
			return res, fmt.Errorf("landlock: %w: landlock not supported (pass --best-effort to run without it)", ErrKernelFeature)
		}
		dropped = append(dropped, "landlock (landlock not supported)")
	}
	if err := seccompAvailable(cfg.Missing); err != nil {
		if !s.BestEffort {
			return res, fmt.Errorf("seccomp: %w: %w (pass --best-effort to run without it)", ErrKernelFeature, err)
		}
		what := "seccomp (" + err.Error() + ")"
		if cfg.HostWrites {
			what += ": files it writes may be made setuid, setgid or writable to others"
		}
		dropped = append(dropped, what)
		cfg.Missing = withMissing(cfg.Missing, "seccomp")
	}
	cfg.Placeholders = p.placeholders.kinds()
	cfg.DenyWrite, cfg.Pin = protectionPlan(prot.prot, cfg.Placeholders)
	if len(cfg.Placeholders) > 0 {
		binds, remove := excludeBinds(cfg.Placeholders)
		l.onClose(remove)
		cfg.Files = append(cfg.Files, binds...)
	}
	idmap := asRoot && !cfg.Missing["idmap"]
	if layer != nil && !idmap {
		return res, fmt.Errorf("writable root layer: idmapped mounts: %w: not supported (simulated by %s)", ErrKernelFeature, SimulateMissingEnv)
	}
	if asRoot && !idmap && c.ReviewDir != "" {
		return res, fmt.Errorf("review mode: idmapped mounts: %w: not supported (simulated by %s)", ErrKernelFeature, SimulateMissingEnv)
	}
	if asRoot && !idmap {
		err := fmt.Errorf("idmapped mounts: %w: not supported (simulated by %s)", ErrKernelFeature, SimulateMissingEnv)
		if !s.BestEffort {
			return res, fmt.Errorf("%w (pass --best-effort to run without it)", err)
		}
		dropped = append(dropped, "idmapped writable mounts ("+err.Error()+"): the sandbox may not be able to write its workspace")
	}

	// The first process's prog.
	ctl, childCtl, err := socketPair()
	if err != nil {
		return res, err
	}
	l.onLoose(func() { ctl.Close() })
	ruleset := -1
	if p.ruleset != nil {
		ruleset = p.ruleset.FD()
	}
	b := &builder{ctl: int(childCtl.Fd()), ruleset: ruleset}
	b.p.call("close hutch's end of the control socket", -1, unix.SYS_CLOSE, k(ctl.Fd()))
	if err := b.hideArgs(c.Wipe); err != nil {
		childCtl.Close()
		return res, err
	}
	// Detached mounts hutch makes and sends once the sandbox exists: the
	// idmapped writable roots, and (root only) the files bound into the
	// view, which the sandbox's unprivileged identity may not reach.
	nrecv := 0
	if idmap {
		for i := range cfg.Writable {
			cfg.Writable[i].FD = i
		}
		nrecv = len(cfg.Writable)
	}
	switch {
	case layer != nil || (img != nil && asRoot):
		cfg.RootLayer = nrecv
		nrecv++
	case img != nil:
		// An ordinary user: the first process stacks the layers itself.
		cfg.ImageLayers, cfg.ImageSize = img.Layers, img.SizeBytes
		if p.ruleset != nil {
			cfg.ImageAccess = p.ruleset.WritableTreeAccess()
		}
	}
	if c.ReviewDir != "" && !idmap && p.ruleset != nil {
		cfg.ReviewAccess = p.ruleset.WritableTreeAccess()
	}
	if homeBuild {
		cfg.HomeLayer = nrecv
		nrecv++
	}
	if idmap && cfg.HomePersist.Path != "" {
		cfg.HomePersist.FD = nrecv
		nrecv++
	}
	var fileTrees []int
	defer func() { closeAll(fileTrees) }()
	for i := range cfg.Files {
		cfg.Files[i].FD = -1
		if !asRoot {
			continue
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, cfg.Files[i].Path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			childCtl.Close()
			return res, fmt.Errorf("clone mount of %q for %s: %w", cfg.Files[i].Path, cfg.Files[i].Target, err)
		}
		fileTrees = append(fileTrees, fd)
		cfg.Files[i].FD = nrecv
		nrecv++
	}
	denyKinds := denyReadKinds(effectiveDenyRead(cfg.DenyRead, cfg.AllowRead), cfg.Writable)
	if si := l.standIns; si != nil {
		var defaults []string
		if !s.Filesystem.NoDefaultDenies {
			defaults = policy.DefaultDenyRead(envHome(c.Environ))
		}
		switch err := si.setNodes(cfg, denyKinds, defaults, s.Filesystem.DenyWrite); {
		case err != nil:
			c.Log.Debug("stand-ins not served: refusals go unreported", "err", err)
			l.standIns = nil
		case si.byChild:
			cfg.StandInsDevice = true
		default:
			cfg.MasksLayer = nrecv
			nrecv++
		}
	}
	for _, v := range c.Volumes {
		cfg.Volumes = append(cfg.Volumes, volumeBind{Dir: v.Dir, At: v.At, FD: nrecv})
		nrecv++
	}
	recvd := b.receive(int(childCtl.Fd()), nrecv)
	b.identity(ids{uid: innerUID, gid: innerGID, setgroups: asRoot, groups: groups})
	b.dieWithHutch(int(childCtl.Fd()), c.AgentSocket == "")
	b.mounts(cfg, recvd, denyKinds)
	if err := b.harden(cfg, ruleset, int(childCtl.Fd())); err != nil {
		childCtl.Close()
		return res, err
	}
	ch, err := b.command(cfg, int(childCtl.Fd()))
	if err != nil {
		childCtl.Close()
		return res, err
	}

	pid, err := spawn(ch, cgroupFD, cfg.Net != "host")
	childCtl.Close()
	if err != nil {
		return res, err
	}
	phase("sandbox cloned")
	if err := l.track(pid); err != nil {
		return res, err
	}
	fail := func(err error) (*launched, error) { return res, err }
	if err := writeIDMaps(pid, idMap{mapUID, hostUID, nids}, idMap{mapGID, hostGID, nids}, asRoot); err != nil {
		return fail(err)
	}
	if group != nil && cgroupFD < 0 {
		// The first process waits for the message below before it runs
		// anything, so nothing escapes the limits by forking early.
		if err := group.Add(pid); err != nil {
			return fail(fmt.Errorf("add sandbox to cgroup: %w", err))
		}
	}
	var fds []int
	switch {
	case idmap && img != nil:
		// The owner of the workspace (and of what allow_write paths it
		// owns) is the image's user inside.
		userns, err := idmapUserns(int(wsStat.Uid), int(wsStat.Gid), hostUID+innerUID, hostGID+innerGID)
		if err != nil {
			return fail(err)
		}
		fds, err = idmapWith(userns, cfg.Writable)
		unix.Close(userns)
		if err != nil {
			return fail(bestEffortHint(err, c.ReviewDir == ""))
		}
	case idmap:
		if fds, err = idmapWritable(pid, cfg.Writable); err != nil {
			return fail(bestEffortHint(err, c.ReviewDir == ""))
		}
	}
	for _, w := range cfg.Writable {
		// The overlay of review mode has inodes of its own: the ruleset
		// lets the sandbox write it on its own mount.
		if w.Review != "" && w.FD >= 0 && w.FD < len(fds) && p.ruleset != nil {
			if err := p.ruleset.AddWritableTree(fds[w.FD]); err != nil {
				closeAll(fds)
				return fail(fmt.Errorf("review: landlock: %w", err))
			}
		}
	}
	if homeBuild {
		hfd, err := homeLayer(pid, cfg.Home, s.Resources.TmpBytes)
		if err != nil {
			closeAll(fds)
			return fail(err)
		}
		fds = append(fds, hfd)
	}
	if idmap && cfg.HomePersist.Path != "" {
		pfd, err := idmapWritable(pid, []bindSrc{cfg.HomePersist})
		if err != nil {
			closeAll(fds)
			return fail(err)
		}
		fds = append(fds, pfd...)
	}
	userns := -1
	if (img != nil && asRoot) || layer != nil {
		var err error
		if userns, err = sandboxUserns(pid); err != nil {
			closeAll(fds)
			return fail(err)
		}
		defer unix.Close(userns)
	}
	if img != nil && asRoot {
		ifd, err := imageLayer(userns, *img, "")
		if err == nil && p.ruleset != nil {
			err = p.ruleset.AddWritableTree(ifd)
		}
		if err != nil {
			if ifd >= 0 {
				unix.Close(ifd)
			}
			closeAll(fds)
			return fail(err)
		}
		fds = append(fds, ifd)
	}
	if layer != nil {
		var lfd int
		var err error
		if len(layer.Lowers) > 0 {
			lfd, err = imageLayer(userns, ImageRoot{Layers: layer.Lowers, SizeBytes: layer.SizeBytes, UID: layer.UID, GID: layer.GID, save: layerSave{keep: layer.Keep, from: layer.From}}, layerWS)
		} else {
			lfd, err = rootLayer(userns, rootDir(s.Root), *layer, layerWS)
		}
		if err != nil {
			closeAll(fds)
			return fail(err)
		}
		if p.ruleset != nil {
			err = p.ruleset.AddWritableTree(lfd)
		}
		fds = append(fds, lfd)
		if err != nil {
			closeAll(fds)
			return fail(err)
		}
	}
	fds = append(fds, fileTrees...)
	fileTrees = nil
	if l.standIns != nil && cfg.MasksLayer >= 0 {
		fds = append(fds, l.standIns.mnt)
		l.standIns.mnt = -1 // closed with fds once sent
	}
	if len(cfg.Volumes) > 0 {
		vfds, err := volumeMounts(userns, cfg.Volumes, p.ruleset)
		if err != nil {
			closeAll(fds)
			return fail(err)
		}
		fds = append(fds, vfds...)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	err = unix.Sendmsg(int(ctl.Fd()), []byte{1}, oob, nil, 0)
	closeAll(fds)
	p.closeRuleset()
	if err != nil {
		return fail(fmt.Errorf("start the sandbox: %w", err))
	}

	var onStandIns func(int)
	if si := l.standIns; si != nil && si.byChild {
		onStandIns = func(dev int) {
			if err := si.fs.Serve(dev); err != nil {
				c.Log.Debug("stand-ins not served: refusals go unreported", "err", err)
			}
		}
	}
	rep, got, err := readReply(int(ctl.Fd()), onStandIns)
	l.master, got.master = got.master, -1
	if err != nil || rep.Kind != replyStarted {
		got.close()
	}
	if err != nil {
		l.kill()
		return res, fmt.Errorf("the sandbox failed before starting the command: %w (%v)", err, l.wait())
	}
	if rep.Kind != replyStarted {
		l.wait()
		return res, b.failure(rep, cfg.Args[0])
	}
	phase("command started")
	if cfg.Listen {
		listeners := got.listeners
		got.listeners = nil
		w, err := serveLazily(c.Proxy, listeners)
		if err != nil {
			return fail(err)
		}
		l.onLoose(w.stop) // before the proxy's Close, registered earlier
	}
	got.close()
	l.dropped = dropped
	for _, d := range dropped {
		fmt.Fprintf(c.Warn, "hutch: warning: running without %s\n", d)
	}
	l.tty = cfg.Tty
	return l, nil
}

// volumeMounts clones each volume's host directory (that mount and those
// below it) idmapped with the sandbox's user namespace userns, so that
// host ids 0–65535 appear as themselves inside, and lets the sandbox
// write there under Landlock (ruleset, nil for none).
func volumeMounts(userns int, vols []volumeBind, ruleset *landlock.Ruleset) ([]int, error) {
	srcs := make([]bindSrc, len(vols))
	for i, v := range vols {
		srcs[i] = bindSrc{Path: v.Dir, FD: -1}
	}
	fds, err := idmapWith(userns, srcs)
	if err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	if ruleset != nil {
		for i, fd := range fds {
			if err := ruleset.AddWritableTree(fd); err != nil {
				closeAll(fds)
				return nil, fmt.Errorf("volume at %s: landlock: %w", vols[i].At, err)
			}
		}
	}
	return fds, nil
}

// WorkspaceAt is where a sandbox's view shows its workspace, whatever the
// tier: the policy's workspace_at in a sandbox from an image, or with a
// root layer in review mode (image), else (and when it is empty) the
// workspace's host path. A writable area
// of the host (roots) at, above or below where the workspace is shown
// would be mixed up with it in the view, and one that holds the workspace
// would show it unprotected at its host path: refused.
func WorkspaceAt(s policy.Spec, image bool, roots []string) (string, error) {
	ws, at := s.Filesystem.Workspace, s.Filesystem.WorkspaceAt
	if !image {
		if at != "" && at != ws {
			return "", fmt.Errorf("workspace_at %s: only a sandbox from an image has its workspace elsewhere than at its host path", at)
		}
		return ws, nil
	}
	if at == "" {
		at = ws
	}
	for _, r := range roots {
		switch {
		case r == ws || at == ws:
		case under(ws, []string{r}):
			// Bound at its host path, it would show the workspace a
			// second time, there, where the workspace's protections
			// (bound at workspace_at) are not.
			return "", fmt.Errorf("writable path %s holds the workspace, which a sandbox from an image shows at %s only", r, at)
		case under(r, []string{at}) || under(at, []string{r}):
			return "", fmt.Errorf("writable path %s: the workspace is at %s in the sandbox, which that path would cover or lie in (choose another --workspace-at)", r, at)
		}
	}
	return at, nil
}

// placeWorkspace sets where the view shows the workspace (a sandbox from
// an image, or a root layer's workspace in review mode (reviewed): the
// policy's workspace_at; else its host path) and the command's working
// directory there, or the image's (img.Dir), with PWD to match. A writable area of the host at, above or below where the
// workspace is shown would be mixed up with it in the view, and one that
// holds the workspace would show it unprotected at its host path:
// refused.
func placeWorkspace(cfg *initConfig, s policy.Spec, img *ImageRoot, reviewed bool, roots []string) error {
	at, err := WorkspaceAt(s, img != nil || reviewed, roots)
	if err != nil || (img == nil && !reviewed) {
		return err
	}
	ws := s.Filesystem.Workspace
	cfg.Workspace = viewMap{Host: ws, At: at}
	cfg.Dir = at
	if img != nil && img.Dir != "" {
		// Made when missing, but never in a writable area of the host:
		// the first process, which makes it, still holds its
		// capabilities, and the image is not the user's to write there.
		cfg.Dir, cfg.MakeDir = img.Dir, !under(img.Dir, append([]string{at}, roots...))
	}
	cfg.Env = append(withoutVars(cfg.Env, []string{"PWD", "OLDPWD"}), "PWD="+cfg.Dir)
	return nil
}

// bestEffortHint is err, the failure of the writable areas' idmapped
// mounts, with the hint that --best-effort runs without them when it
// does (hint; not in review mode, which cannot run without).
func bestEffortHint(err error, hint bool) error {
	if !hint {
		return err
	}
	return fmt.Errorf("%w (pass --best-effort to run without it)", err)
}

// streamFDs are the descriptors of a command's stdin, stdout and stderr,
// -1 for a nil one (the command then has hutch's).
func streamFDs(files ...*os.File) []int {
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = -1
		if f != nil {
			fds[i] = int(f.Fd())
		}
	}
	return fds
}

// Run runs c.Args in a new sandbox and waits for it to end.
func Run(ctx context.Context, c Config) (Result, error) {
	res := Result{ExitCode: ExitHutchError}
	if len(c.Args) == 0 {
		return res, errors.New("no command given")
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	l, err := launch(c, nil)
	if err != nil {
		var ie *InitError
		if errors.As(err, &ie) {
			res.ExitCode = ie.Code
		}
		return res, err
	}
	defer l.close()
	res.Dropped = l.dropped
	s := c.Spec
	pid := l.pid
	fail := func(err error) (Result, error) {
		l.kill()
		l.wait()
		return res, err
	}
	var term *ptyRelay
	if l.tty {
		if l.master < 0 {
			return fail(errors.New("the sandbox sent no terminal"))
		}
		term = startPtyRelay(os.NewFile(uintptr(l.master), "pty-master"), c.Stdin, c.Stdout)
		l.master = -1
		defer term.Close()
	}

	var timeout <-chan struct{}
	if s.Resources.Timeout > 0 {
		tctx, cancel := context.WithTimeout(ctx, s.Resources.Timeout)
		defer cancel()
		timeout = tctx.Done()
	} else {
		timeout = ctx.Done()
	}
	for {
		select {
		case sig := <-l.sigs:
			_ = unix.Kill(pid, sig.(syscall.Signal)) // PID 1 passes it on to the command
			continue
		case <-timeout:
			l.kill()
			l.wait()
			res.TimedOut = ctx.Err() == nil
			res.ExitCode = ExitTimeout
			if !res.TimedOut {
				res.ExitCode = 128 + int(unix.SIGKILL)
			}
		case <-l.exited:
			res.ExitCode = exitCode(l.ps, nil)
		}
		break
	}
	c.Log.Debug("sandbox ended")
	if term != nil {
		term.Drain()
	}
	res.SetAside = l.finish()
	if l.standIns != nil {
		res.Refused, res.RefusedMore = l.standIns.refused()
	}
	if l.group != nil {
		if n, err := l.group.OOMKills(); err == nil && n > 0 {
			res.OOMKilled = true
		}
	}
	return res, nil
}

// launched is a started sandbox: its first process, and what hutch holds
// for it until it is closed.
type launched struct {
	pid     int
	exited  chan struct{}    // closed when the first process was reaped
	ps      *os.ProcessState // its state, once exited is closed
	master  int              // the pty's master, or -1
	tty     bool
	sigs    chan os.Signal // signals to forward (Run only)
	group   *cgroups.Group
	dropped []string
	closers []closer
	// pidfd, when >= 0, is a pidfd of the first process (a sandbox taken
	// again, Reattach), which kill signals through.
	pidfd   int
	pidfile *os.File   // pidfd's file, which close closes
	after   *aftercare // what to check once the sandbox has ended, if anything
	// standIns serves the masks and placeholders, when hutch does.
	standIns *standIns
	warn     io.Writer // where close reports what aftercare set aside
	log      *slog.Logger
}

// finish runs the aftercare once the sandbox has ended, once: what the
// sandbox made that would run commands outside it is set aside.
func (l *launched) finish() []SetAside {
	l.kill()
	l.wait()
	if l.after == nil {
		return nil
	}
	a := l.after
	l.after = nil
	t0 := time.Now()
	sa := a.run()
	if l.log != nil {
		l.log.Debug("sandbox ended: writable areas checked", "took", time.Since(t0), "set_aside", len(sa))
	}
	return sa
}

// closer is what close runs; loose ones run at a release too (Release):
// they let go of what hutch holds for a sandbox that runs on.
type closer struct {
	f     func()
	loose bool
}

// onClose registers f to run when l is closed, in reverse order.
func (l *launched) onClose(f func()) { l.closers = append(l.closers, closer{f: f}) }

// onLoose registers f to run when l is closed or released, in reverse
// order.
func (l *launched) onLoose(f func()) { l.closers = append(l.closers, closer{f: f, loose: true}) }

// runClosers runs l's closers, in reverse order, those that are loose
// only when all is false, and forgets them.
func (l *launched) runClosers(all bool) {
	for i := len(l.closers) - 1; i >= 0; i-- {
		if all || l.closers[i].loose {
			l.closers[i].f()
		}
	}
	l.closers = nil
}

// track starts waiting for the first process pid.
func (l *launched) track(pid int) error {
	proc, err := os.FindProcess(pid)
	if err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		return fmt.Errorf("sandbox process: %w", err)
	}
	l.pid = pid
	l.exited = make(chan struct{})
	go func() {
		l.ps, _ = proc.Wait()
		close(l.exited)
	}()
	return nil
}

// kill ends the sandbox: SIGKILL to its first process, and the kernel ends
// the rest of its pid namespace.
func (l *launched) kill() {
	if l.pid <= 0 {
		return
	}
	select {
	case <-l.exited:
	default:
		if l.pidfd >= 0 {
			_ = unix.PidfdSendSignal(l.pidfd, unix.SIGKILL, nil, 0)
			return
		}
		_ = unix.Kill(l.pid, unix.SIGKILL)
	}
}

// wait waits for the first process to be reaped and returns its state.
func (l *launched) wait() *os.ProcessState {
	if l.exited == nil {
		return nil
	}
	<-l.exited
	return l.ps
}

// close ends the sandbox if it still runs and releases everything hutch
// held for it.
func (l *launched) close() {
	if sa := l.finish(); len(sa) > 0 && l.warn != nil {
		for _, line := range SetAsideReport(sa) {
			fmt.Fprintln(l.warn, line)
		}
	}
	if l.master >= 0 {
		unix.Close(l.master)
		l.master = -1
	}
	l.runClosers(true)
	if l.pidfile != nil {
		l.pidfile.Close()
		l.pidfd = -1
	}
}

// netWaiter holds the sockets the sandbox made for hutch (netSockets)
// until the first connection or datagram arrives on one of them, and only
// then hands them to the proxy. Most commands never touch the network, and
// serving at once would cost every sandbox the proxy's goroutines, their
// stacks and the code they fault in — about 5% of a default sandbox's
// start-up when measured. Waiting costs an epoll descriptor and one parked
// goroutine.
type netWaiter struct {
	p   Proxy
	fds []int    // the sockets: HTTP, SOCKS5, DNS
	ep  *os.File // an epoll descriptor watching fds, itself in Go's poller
	mu  sync.Mutex
	// done is set once the sockets went to the proxy or were closed.
	done bool
}

// serveLazily starts waiting on fds for p; it takes the descriptors over.
func serveLazily(p Proxy, fds []int) (*netWaiter, error) {
	if len(fds) != 3 {
		closeAll(fds)
		return nil, errors.New("the sandbox sent no proxy listeners")
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		closeAll(fds)
		return nil, fmt.Errorf("network sockets: epoll: %w", err)
	}
	for _, fd := range fds {
		if err == nil {
			err = unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)})
		}
	}
	if err == nil {
		err = unix.SetNonblock(ep, true)
	}
	if err != nil {
		unix.Close(ep)
		closeAll(fds)
		return nil, fmt.Errorf("network sockets: epoll: %w", err)
	}
	w := &netWaiter{p: p, fds: fds, ep: os.NewFile(uintptr(ep), "hutch-net-wait")}
	rc, err := w.ep.SyscallConn()
	if err != nil {
		w.stop()
		return nil, fmt.Errorf("network sockets: %w", err)
	}
	go func() {
		var evs [3]unix.EpollEvent
		err := rc.Read(func(fd uintptr) bool {
			n, err := unix.EpollWait(int(fd), evs[:], 0)
			return n > 0 || (err != nil && err != unix.EINTR)
		})
		if err == nil {
			w.handOver()
		}
	}()
	return w, nil
}

// handOver gives the sockets to the proxy, unless stop came first.
func (w *netWaiter) handOver() {
	w.mu.Lock()
	if w.done {
		w.mu.Unlock()
		return
	}
	w.done = true
	w.mu.Unlock()
	w.ep.Close()
	if err := serveProxy(w.p, w.fds); err != nil {
		// The sandbox's clients then find no one listening.
		return
	}
}

// stop closes the sockets if the proxy never got them, and ends the wait.
func (w *netWaiter) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	w.done = true
	w.ep.Close()
	closeAll(w.fds)
}

// serveProxy serves the sockets the sandbox made for hutch (netSockets):
// the proxy's listeners (HTTP, SOCKS5) and the DNS socket; closing the
// proxy stops them.
func serveProxy(p Proxy, fds []int) error {
	var ls [2]net.Listener
	for i, fd := range fds[:2] {
		f := os.NewFile(uintptr(fd), "proxy-listener")
		l, err := net.FileListener(f)
		f.Close()
		if err != nil {
			for _, l := range ls[:i] {
				l.Close()
			}
			closeAll(fds[i+1:])
			return fmt.Errorf("proxy listener: %w", err)
		}
		ls[i] = l
	}
	f := os.NewFile(uintptr(fds[2]), "dns-socket")
	dns, err := net.FilePacketConn(f)
	f.Close()
	if err != nil {
		ls[0].Close()
		ls[1].Close()
		return fmt.Errorf("DNS socket: %w", err)
	}
	go func() { _ = p.ServeHTTP(ls[0]) }()
	go func() { _ = p.ServeSOCKS(ls[1]) }()
	go func() { _ = p.ServeDNS(dns) }()
	return nil
}

// resolverSockets are the unix sockets of the host's name resolvers
// (systemd-resolved's varlink API, which glibc's nss-resolve uses, and
// nscd's), hidden from sandboxes without the host's network.
var resolverSockets = []string{
	"/run/systemd/resolve/io.systemd.Resolve",
	"/run/systemd/resolve/io.systemd.Resolve.Monitor",
	"/run/nscd/socket",
	"/var/run/nscd/socket",
}

// The variables hutch sets in proxy mode, and with secrets: what the caller
// passed under these names is dropped, in any letter case.
var (
	proxyEnvVars = []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "FTP_PROXY", "GIT_SSH_COMMAND"}
	trustEnvVars = []string{"SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "GIT_SSL_CAPATH"}
)

// rootDir is the host directory that a policy's root (policy.DefaultRoot,
// "" before Normalize, or a directory) shows as the sandbox's "/".
func rootDir(root string) string {
	if root == "" || root == policy.DefaultRoot {
		return "/"
	}
	return root
}

// withoutVars drops the variables named in names (any letter case).
func withoutVars(env, names []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(names, strings.ToUpper(name)) {
			out = append(out, kv)
		}
	}
	return out
}

func exitCode(ps *os.ProcessState, err error) int {
	if ps == nil {
		return ExitHutchError
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
		if ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
	return ps.ExitCode()
}

func startError(err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("create sandbox namespaces: %w: %w (are user namespaces enabled? check sysctl user.max_user_namespaces and kernel.unprivileged_userns_clone, and AppArmor's kernel.apparmor_restrict_unprivileged_userns)", ErrKernelFeature, err)
	}
	return fmt.Errorf("start the sandbox: %w", err)
}

// privateHome returns the sandbox's home directory when root started the
// sandbox and the home is closed to others (as /root is): the sandbox's
// unprivileged identity could not enter it, and tools that need a writable
// home (git, go, npm caches) would fail. It gets a private tmpfs instead.
func privateHome(environ, writable []string) string {
	home := envHome(environ)
	var st unix.Stat_t
	if home == "" || home == "/" || !filepath.IsAbs(home) || under(home, writable) || unix.Stat(home, &st) != nil {
		return ""
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Mode&0o001 != 0 {
		return ""
	}
	return filepath.Clean(home)
}

// ownFilesystems are the sandbox's own filesystems in its view.
var ownFilesystems = []string{"/tmp", "/proc", "/dev", "/sys"}

// shadows lists, for the writable roots, the first directory on the way to
// each (from /) that the sandbox's identity may not search, but none under
// the private home or another writable root (which the sandbox gets as
// its own) — see initConfig.Shadows.
func shadows(roots []string, id identity, privateHome, home string) []string {
	var out []string
	for _, r := range roots {
		dir := "/"
		for _, part := range strings.Split(strings.Trim(filepath.Dir(r), "/"), "/") {
			if part == "" {
				break
			}
			dir = filepath.Join(dir, part)
			if dir == privateHome || dir == home || under(dir, roots) || under(dir, ownFilesystems) {
				break // the sandbox's own: the way is made there anyway
			}
			var st unix.Stat_t
			if unix.Stat(dir, &st) != nil || hasACL(dir) {
				break
			}
			if !id.allows(&st, 1) {
				out = append(out, dir)
				break
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// envHome is the home directory the sandbox's environment names.
func envHome(environ []string) string {
	var home string
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "HOME="); ok {
			home = v
		}
	}
	if !filepath.IsAbs(home) {
		return ""
	}
	return filepath.Clean(home)
}

func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func isTerminal(f *os.File) bool {
	if f == nil {
		return false
	}
	// Through the raw connection, not Fd, which would put f in blocking
	// mode for good.
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	ok := false
	_ = rc.Control(func(fd uintptr) {
		_, err := unix.IoctlGetTermios(int(fd), unix.TCGETS)
		ok = err == nil
	})
	return ok
}
