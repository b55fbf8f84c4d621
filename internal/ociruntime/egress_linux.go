package ociruntime

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/egress"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/secrets"
)

// Files of a container's state directory that its egress uses.
const (
	egressFile   = "egress.json"
	resolvFile   = "resolv.conf"
	caFile       = "ca-certificates.crt"
	proxyPidFile = "proxy.pid"
	eventsFile   = "events.jsonl"
	// ownerLink, in a joining container's state, names the state
	// directory of the container whose proxy serves the network
	// namespace it joined.
	ownerLink = "owner"
)

// netIndex is the directory, next to the containers' state directories,
// of links from a network namespace's inode number to the state
// directory of the container whose proxy serves it.
func netIndex(stateDir string) string {
	return filepath.Join(filepath.Dir(filepath.Dir(stateDir)), "hutch-net")
}

// capsEgressDrops are the capabilities a container whose egress hutch
// holds loses: with them it could change its network namespace's
// firewall and routes, or write raw packets.
var capsEgressDrops = []string{"CAP_NET_ADMIN", "CAP_NET_RAW"}

// prepareEgress makes the container's configuration send its traffic to
// hutch's proxy: the proxy's variables and the secrets' placeholders in its
// environment, a resolv.conf that names its loopback, the proxy's CA where
// TLS clients look for their roots (when it intercepts), and no
// capability over its network. It records the plan for the hooks.
func prepareEgress(s *specs.Spec, dir string, plan egressPlan) error {
	plan.Hostname = s.Hostname
	nsPath, ok := "", false
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			nsPath, ok = ns.Path, true
		}
	}
	// A container that joins a network namespace hutch's proxy serves
	// gets that proxy's egress, and only with the same policy: a host
	// policy in it would keep its capabilities over the network, another
	// secret would get no placeholder.
	owner := joinedOwner(dir, nsPath)
	var op egressPlan
	if owner != "" {
		if err := readJSON(filepath.Join(owner, egressFile), &op); err != nil {
			return fmt.Errorf("the network namespace's proxy: %w", err)
		}
		if !sameEgress(op, plan) {
			return fmt.Errorf("the container joins the network namespace of another (a pod's) whose egress policy differs: containers that share a network share its policy (%s, %s, %s, %s)", AnnotationPolicy, AnnotationAllowDomains, AnnotationSecrets, AnnotationAgent)
		}
	}
	if plan.Mode == "host" {
		return writeJSON(filepath.Join(dir, egressFile), plan)
	}
	if !ok {
		return errors.New("the container shares the host's network (no network namespace of its own: docker --network host, a pod's hostNetwork): hutch-runc cannot hold its egress to the proxy; give it a network of its own, or a node policy with network.mode host")
	}
	ca := filepath.Join(plan.Files, caFile)
	var secs []*secrets.Secret
	if owner != "" {
		plan.Placeholders = op.Placeholders
		if plan.intercepts() {
			// A copy of the proxy's CA, which its proxy wrote when it
			// started: the owner's directory is its own user
			// namespace's, which the container's cannot enter.
			b, err := os.ReadFile(filepath.Join(op.Files, caFile))
			if err == nil {
				err = os.WriteFile(ca, b, 0o644)
			}
			if err != nil {
				return fmt.Errorf("the network namespace's proxy's CA: %w", err)
			}
		}
		if err := os.Symlink(owner, filepath.Join(dir, ownerLink)); err != nil {
			return err
		}
		for _, sec := range plan.Secrets {
			secs = append(secs, &secrets.Secret{Name: sec.Name, Placeholder: op.Placeholders[sec.Name]})
		}
	} else {
		var err error
		if secs, err = checkEgress(plan); err != nil {
			return err
		}
		plan.Placeholders = map[string]string{}
		for _, sec := range secs {
			plan.Placeholders[sec.Name] = sec.Placeholder
		}
		if plan.intercepts() {
			if err := os.WriteFile(ca, nil, 0o644); err != nil {
				return err
			}
		}
	}
	env, err := egress.PlaceholderEnv(secs, sandbox.ProxyEnviron(s.Process.Env, plan.Mode), s.Process.Args)
	for _, v := range egress.Values(secs) {
		clear(v)
	}
	if err != nil {
		return err
	}
	if plan.intercepts() {
		var paths []string
		if paths, env, err = trustBundleIn(s.Root.Path, env); err != nil {
			return err
		}
		for _, p := range paths {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: p, Type: "bind", Source: ca, Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
		}
	}
	// What hutch set, for the processes `exec` starts: they get it too.
	for _, kv := range env {
		if !slices.Contains(s.Process.Env, kv) {
			plan.Env = append(plan.Env, kv)
		}
	}
	s.Process.Env = env

	resolv := filepath.Join(plan.Files, resolvFile)
	if err := os.WriteFile(resolv, []byte(sandbox.ResolvConf), 0o644); err != nil {
		return err
	}
	m := specs.Mount{Destination: "/etc/resolv.conf", Type: "bind", Source: resolv, Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}}
	if i := slices.IndexFunc(s.Mounts, func(m specs.Mount) bool { return filepath.Clean(m.Destination) == "/etc/resolv.conf" }); i >= 0 {
		s.Mounts[i] = m
	} else {
		s.Mounts = append(s.Mounts, m)
	}
	dropEgressCaps(s.Process.Capabilities)
	return writeJSON(filepath.Join(dir, egressFile), plan)
}

// isEgressCap reports whether a capability's name, as runc reads it
// (CAP_NET_RAW) or spelled otherwise (net_raw), is one that a container
// whose egress hutch holds loses.
func isEgressCap(name string) bool {
	n := strings.ToUpper(strings.TrimSpace(name))
	if !strings.HasPrefix(n, "CAP_") {
		n = "CAP_" + n
	}
	return slices.Contains(capsEgressDrops, n)
}

// dropEgressCaps takes the capabilities over the network out of every set
// of c: the container's process at create, and every process exec starts
// in it, whatever its engine asked (docker exec --privileged).
func dropEgressCaps(c *specs.LinuxCapabilities) {
	if c == nil {
		return
	}
	drop := func(l []string) []string { return slices.DeleteFunc(l, isEgressCap) }
	c.Bounding, c.Effective, c.Permitted, c.Inheritable, c.Ambient = drop(c.Bounding), drop(c.Effective), drop(c.Permitted), drop(c.Inheritable), drop(c.Ambient)
}

// trustBundleIn is sandbox.TrustBundle for the container's root, looked
// up from inside it: on a thread whose root directory is the container's
// (unshared, then chrooted; it ends with its goroutine), so that the
// image's symbolic links (/etc/ssl/certs/ca-certificates.crt ->
// /root/.ssh/id_rsa, or -> ../../../..) resolve in the image, as they
// will in the container, and never make hutch-runc look at, or mount by
// automount, a file of the host.
func trustBundleIn(root string, env []string) (paths, out []string, err error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		goruntime.LockOSThread()
		if err = unix.Unshare(unix.CLONE_FS); err != nil {
			err = fmt.Errorf("look up the image's CA bundles: unshare: %w", err)
			return
		}
		if err = unix.Chroot(root); err == nil {
			err = unix.Chdir("/")
		}
		if err != nil {
			err = fmt.Errorf("look up the image's CA bundles in %s: %w", root, err)
			return
		}
		paths, _, out = sandbox.TrustBundle("/", env)
	}()
	<-done
	return paths, out, err
}

// sameEgress reports whether a and b, the plans of a network namespace's
// owner and of a container that joins it, give the same egress: mode,
// policy, rules (the whole network section) and secrets, by name.
func sameEgress(a, b egressPlan) bool {
	names := func(l []policy.Secret) []string {
		var out []string
		for _, s := range l {
			out = append(out, s.Name)
		}
		slices.Sort(out)
		return out
	}
	na, errA := json.Marshal(a.Network)
	nb, errB := json.Marshal(b.Network)
	return errA == nil && errB == nil && a.Mode == b.Mode && a.Policy == b.Policy && a.Operator == b.Operator && a.AgentPort == b.AgentPort &&
		string(na) == string(nb) && slices.Equal(names(a.Secrets), names(b.Secrets))
}

// checkEgress builds the plan's rules, as the proxy will, so that a bad
// policy fails the create, and returns its secrets with their
// placeholders (and their values, which the caller wipes).
func checkEgress(plan egressPlan) ([]*secrets.Secret, error) {
	_, secs, err := egressRules(plan)
	return secs, err
}

// egressRules are the proxy's rules for plan, with its secrets read from
// the node.
func egressRules(plan egressPlan) (*egress.Rules, []*secrets.Secret, error) {
	if plan.Mode == "none" {
		r, err := egress.NewRules(egress.Config{Offline: true, OperatorRules: true})
		return r, nil, err
	}
	cfg, err := egress.ConfigFromPolicy(plan.Network)
	if err != nil {
		return nil, nil, err
	}
	secs, err := egress.LoadSecrets(plan.Secrets, nil)
	if err != nil {
		return nil, nil, err
	}
	for _, s := range secs {
		if p, ok := plan.Placeholders[s.Name]; ok {
			s.Placeholder = p
		}
	}
	cfg.Secrets = secs
	if cfg.Headers, err = egress.HeaderRules(plan.Network.Headers, secs); err != nil {
		return nil, secs, fmt.Errorf("network policy: %w", err)
	}
	cfg.OperatorRules = plan.Operator
	r, err := egress.NewRules(cfg)
	if err != nil {
		return nil, secs, fmt.Errorf("network policy: %w", err)
	}
	return r, secs, nil
}

// joinedOwner is the state directory of the container whose proxy serves
// the network namespace at nsPath, "" when none does (or nsPath is "": a
// namespace the low-level runtime makes).
func joinedOwner(dir, nsPath string) string {
	if nsPath == "" {
		return ""
	}
	var st syscall.Stat_t
	if err := syscall.Stat(nsPath, &st); err != nil {
		return ""
	}
	owner, err := os.Readlink(filepath.Join(netIndex(dir), strconv.FormatUint(st.Ino, 10)))
	if err != nil {
		return ""
	}
	// The link outlives the namespace until its owner's poststop, and
	// a namespace's inode number is given again once it is gone: only
	// a live proxy says the namespace at nsPath is the one it serves (a
	// new namespace taken for it would get no firewall).
	if pid, err := liveProxy(owner); err != nil || pid == 0 {
		return ""
	}
	return owner
}

// execEnv is the environment of a process `exec` starts in a container
// whose egress plan is plan: the engine's, with what hutch set in the
// container's own environment (the proxy's variables, the secrets'
// placeholders, the trust bundle's variables) in place of the same names.
func execEnv(env []string, plan egressPlan) []string {
	if plan.Mode == "host" {
		return env
	}
	env = sandbox.ProxyEnviron(env, plan.Mode)
	names := map[string]bool{}
	for _, kv := range plan.Env {
		k, _, _ := strings.Cut(kv, "=")
		names[k] = true
	}
	out := slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return names[k]
	})
	return append(out, plan.Env...)
}
