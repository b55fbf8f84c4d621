package ociruntime

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/egress"
	"github.com/hutch-sandbox/hutch/internal/landlock"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/seccomp"
)

// CheckCommand is hutch-runc's command that tells what the node offers
// its containers, for the one who installs it (a DaemonSet's readiness).
const CheckCommand = "check"

// checkItem is one thing a node needs, or may offer.
type checkItem struct {
	name string
	// required: without it hutch-runc refuses to create containers
	// (or, for the gVisor tier, that tier's).
	required bool
	run      func() (string, error)
}

// checkMain prints one line per item — "ok", "missing" or "absent"
// (optional) with what it found — and returns 1 when a required item is
// missing (or a node policy is bad).
func (r *runtime) checkMain(stdout io.Writer) int {
	items := []checkItem{
		{"low-level runtime", true, func() (string, error) {
			cmd := exec.Command(r.backend, "--version")
			if r.host != nil {
				// The node's runtime, with the node's libraries.
				cmd.SysProcAttr = &unix.SysProcAttr{Chroot: r.host.Host}
				cmd.Dir = "/"
			}
			out, err := cmd.Output()
			if err != nil {
				return "", fmt.Errorf("%s --version: %w", r.backend, err)
			}
			first, _, _ := strings.Cut(string(out), "\n")
			if r.tier != TierGVisor && filepath.Base(r.backend) == "runc" && !runcVersionJoinsUserLast(string(out)) {
				first += " (before 1.2: a pod's containers get no user namespace)"
			}
			return r.backend + ": " + first, nil
		}},
		{"Landlock", true, func() (string, error) {
			abi := landlock.ABI()
			if abi < 1 {
				return "", fmt.Errorf("not in this kernel, or not enabled (lsm=)")
			}
			note := ""
			if abi < 6 {
				note = " (below 6: abstract unix sockets and signals are not scoped)"
			}
			return fmt.Sprintf("ABI %d%s", abi, note), nil
		}},
		{"seccomp", true, func() (string, error) { return "filters with user notification", seccomp.Supported() }},
		{"user namespaces and idmapped mounts", true, func() (string, error) { return checkIdmap(r.idmapParents()) }},
		{"nftables with conntrack (egress)", true, checkNftables},
		{"node policies", true, func() (string, error) { return r.checkPolicies() }},
	}
	if r.host != nil {
		items = append(items, checkItem{"installation", true, func() (string, error) {
			self, err := os.Executable()
			if err != nil {
				return "", fmt.Errorf("find hutch-runc's own binary: %w", err)
			}
			return r.host.Verify(self)
		}}, checkItem{"containerd imports the drop-in", false, func() (string, error) {
			if w := r.host.ImportWarning(); w != "" {
				return "", errors.New(w)
			}
			return r.host.ContainerdConfig, nil
		}})
	}
	if r.tier == TierGVisor {
		items[0].name = "runsc (gVisor tier)"
	}
	failed := 0
	for _, it := range items {
		what, err := it.run()
		switch {
		case err == nil:
			fmt.Fprintf(stdout, "ok       %s: %s\n", it.name, what)
		case it.required:
			failed++
			fmt.Fprintf(stdout, "missing  %s: %v\n", it.name, err)
		default:
			fmt.Fprintf(stdout, "absent   %s: %v\n", it.name, err)
		}
	}
	if failed > 0 {
		fmt.Fprintf(stdout, "hutch-runc cannot run containers on this node: %d required item(s) missing\n", failed)
		return 1
	}
	return 0
}

// idmapParents are the directories checkIdmap tries: the temporary
// directory's and /run (a tmpfs, hutch-runc's state), the node's under
// check --host.
func (r *runtime) idmapParents() []string {
	if r.host != nil {
		return []string{filepath.Join(r.host.Host, "tmp"), filepath.Join(r.host.Host, "run")}
	}
	return []string{os.TempDir(), "/run"}
}

// checkIdmap makes a user namespace and an idmapped mount of a new
// directory in each of parents.
func checkIdmap(parents []string) (string, error) {
	var done []string
	for _, parent := range parents {
		src, err := os.MkdirTemp(parent, "hutch-runc-check-")
		if err != nil {
			continue
		}
		dst, err := os.MkdirTemp(parent, "hutch-runc-check-")
		if err != nil {
			os.Remove(src)
			continue
		}
		maps := fmt.Sprintf("0 %d %d", idBase, idBlock)
		err = sandbox.MountIdmapped([]string{src}, []string{dst}, maps, maps)
		if err == nil {
			unix.Unmount(dst, unix.MNT_DETACH)
		}
		os.Remove(dst)
		os.Remove(src)
		if err != nil {
			return "", fmt.Errorf("%s: %w", parent, err)
		}
		done = append(done, parent)
	}
	if len(done) == 0 {
		return "", fmt.Errorf("no directory to try them in")
	}
	return "on " + strings.Join(done, ", "), nil
}

// checkNftables makes a network namespace and the firewall hutch-runc
// puts in a container's (with an agent's port), on a thread that then
// ends.
func checkNftables() (string, error) {
	err := inNewNetns(func(ns int) error {
		if err := egressFirewall(ns, 1); err != nil {
			return err
		}
		c, err := nftables.New(nftables.WithNetNSFd(ns))
		if err != nil {
			return err
		}
		tables, err := c.ListTables()
		if err == nil && len(tables) != 1 {
			err = fmt.Errorf("%d tables after adding one", len(tables))
		}
		return err
	})
	if err != nil {
		return "", err
	}
	return "a container's table installs", nil
}

// inNewNetns runs f with a new network namespace's descriptor, on a
// thread that made it and then ends: no other thread enters it.
func inNewNetns(f func(ns int) error) error {
	errc := make(chan error, 1)
	go func() {
		// The thread ends with the goroutine: it never leaves the
		// namespace it makes.
		goruntime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("network namespace: %w", err)
			return
		}
		ns, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- err
			return
		}
		defer ns.Close()
		errc <- f(int(ns.Fd()))
	}()
	return <-errc
}

// checkPolicies loads every policy of the node's directory.
func (r *runtime) checkPolicies() (string, error) {
	files, err := filepath.Glob(filepath.Join(r.policyDir, "*.yaml"))
	if err != nil {
		return "", err
	}
	if len(files) == 0 {
		return fmt.Sprintf("none in %s: containers reach nothing", r.policyDir), nil
	}
	var names []string
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		// As the operator's choice (--hutch-policy): a policy scoped to
		// some namespaces is checked whole all the same.
		plan, err := planEgress(nil, name, r.policyDir)
		if err != nil {
			return "", err
		}
		if _, scope, err := loadNodePolicy(f); err == nil && len(scope.KubernetesNamespaces) > 0 {
			name += " (pods of " + strings.Join(scope.KubernetesNamespaces, ", ") + ")"
		}
		if plan.Mode != "host" {
			_, secs, err := egressRules(plan)
			for _, v := range egress.Values(secs) {
				clear(v)
			}
			if err != nil {
				return "", fmt.Errorf("policy %s: %w", name, err)
			}
		}
		names = append(names, name)
	}
	return fmt.Sprintf("%s: %s", r.policyDir, strings.Join(names, ", ")), nil
}

// checkFlags reads check's own flags: none, or --host DIR (and the paths
// of install's flags) to check the node whose root is at DIR from a pod
// (a DaemonSet's readiness probe).
func checkFlags(args []string) (*Installation, error) {
	if len(args) == 0 {
		return nil, nil
	}
	in, err := installFlags(CheckCommand, args, nil, nil)
	if err != nil {
		return nil, err
	}
	return in, in.Validate()
}

// hostBinDirs are where check --host looks for the node's runtime, in the
// order of a usual PATH.
var hostBinDirs = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// hostRuntime finds the node's low-level runtime (runsc for the gVisor
// tier) under its root host, and returns its path on the node: the one
// RuntimeEnv (RunscEnv, --hutch-runsc) names, or the first runc or crun
// (runsc) of hostBinDirs. containerd's environment, which may name
// another, is not seen from a pod: give the DaemonSet's the same.
func hostRuntime(host, tier string, cl *cmdline) (string, error) {
	names, given, env := []string{"runc", "crun"}, os.Getenv(RuntimeEnv), RuntimeEnv
	if tier == TierGVisor {
		names, env = []string{"runsc"}, RunscEnv
		var ok bool
		if given, ok = cl.globalValue(hutchFlagRunsc); !ok {
			given = os.Getenv(RunscEnv)
		}
	}
	if given != "" {
		if !filepath.IsAbs(given) {
			return "", fmt.Errorf("the node's runtime %q: not an absolute path", given)
		}
		if _, err := os.Lstat(filepath.Join(host, given)); err != nil {
			return "", fmt.Errorf("the node's runtime: %w", err)
		}
		return given, nil
	}
	for _, n := range names {
		for _, d := range hostBinDirs {
			p := filepath.Join(d, n)
			if fi, err := os.Lstat(filepath.Join(host, p)); err == nil && !fi.IsDir() {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("the node (%s) has no %s in %s (or set %s to its path on the node)", host, strings.Join(names, " or "), strings.Join(hostBinDirs, ", "), env)
}
