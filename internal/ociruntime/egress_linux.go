package ociruntime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/hutch-sandbox/hutch/internal/egress"
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
	if plan.Mode == "host" {
		return writeJSON(filepath.Join(dir, egressFile), plan)
	}
	nsPath, ok := "", false
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			nsPath, ok = ns.Path, true
		}
	}
	if !ok {
		return errors.New("the container shares the host's network (no network namespace of its own: docker --network host, a pod's hostNetwork): hutch-runc cannot hold its egress to the proxy; give it a network of its own, or a node policy with network.mode host")
	}
	ca := filepath.Join(plan.Files, caFile)
	var secs []*secrets.Secret
	if owner := joinedOwner(dir, nsPath); owner != "" {
		var op egressPlan
		if err := readJSON(filepath.Join(owner, egressFile), &op); err != nil {
			return fmt.Errorf("the network namespace's proxy: %w", err)
		}
		if op.Policy != plan.Policy || !slices.Equal(op.Network.AllowedDomains, plan.Network.AllowedDomains) || len(op.Secrets) != len(plan.Secrets) || op.Mode != plan.Mode {
			return fmt.Errorf("the container joins the network namespace of another (a pod's) whose egress policy differs: containers that share a network share its policy (%s, %s)", AnnotationPolicy, AnnotationAllowDomains)
		}
		plan.Placeholders = op.Placeholders
		ca = filepath.Join(op.Files, caFile)
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
		paths, _, env = sandbox.TrustBundle(s.Root.Path, env)
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
	if c := s.Process.Capabilities; c != nil {
		drop := func(l []string) []string {
			return slices.DeleteFunc(l, func(c string) bool { return slices.Contains(capsEgressDrops, c) })
		}
		c.Bounding, c.Effective, c.Permitted, c.Inheritable, c.Ambient = drop(c.Bounding), drop(c.Effective), drop(c.Permitted), drop(c.Inheritable), drop(c.Ambient)
	}
	return writeJSON(filepath.Join(dir, egressFile), plan)
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
	if _, err := os.Stat(filepath.Join(owner, proxyPidFile)); err != nil {
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
