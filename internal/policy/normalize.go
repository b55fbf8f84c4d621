package policy

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// Defaults applied by Normalize.
const (
	// DefaultRoot shares the host's root filesystem, read-only.
	DefaultRoot = "host"
	// DefaultNetworkMode is loopback only.
	DefaultNetworkMode = "none"
	// DefaultTmpBytes is the size of the sandbox's private /tmp.
	DefaultTmpBytes = 256 * mib
	// DefaultPids bounds processes and threads.
	DefaultPids = 4096
)

// Minimums checked by Validate.
const (
	MinMemoryBytes = 4 * mib
	MinTmpBytes    = 1 * mib
	MinDiskBytes   = 16 * mib
	MinPids        = 8
)

// Normalize fills in defaults and puts every path in canonical form, for a
// sandbox started in cwd by a user whose home directory is home (both
// absolute; home may be empty if unknown, and then "~" is an error).
//
// Defaults: root "host"; workspace cwd; network mode "none" ("proxy" when
// something is allowed); tmp_size
// 256m; pids 4096. Memory and CPU are not limited unless asked for: a hard
// memory cap needs a cgroup, which costs a kernel RCU grace period per
// sandbox on cgroup v1 hosts, while the pids limit can always be enforced
// cheaply (see docs/ARCHITECTURE.md).
//
// Paths: "~" and "~/x" are expanded with home, relative paths are made
// absolute against cwd (not against the policy file's directory), all are
// cleaned, and lists lose duplicates. allow_write entries equal to the
// workspace are dropped. Unless no_default_denies is set,
// DefaultDenyRead(home) is put in front of deny_read; the default
// deny-write names stay out of the Spec and are returned by DenyWriteRules.
//
// Normalize is idempotent. It checks only what it needs; call Validate
// afterwards.
func (s *Spec) Normalize(cwd, home string) error {
	if !filepath.IsAbs(cwd) {
		return fieldErrorf("normalize policy: working directory %q is not absolute", cwd)
	}
	if home != "" && !filepath.IsAbs(home) {
		return fieldErrorf("normalize policy: home directory %q is not absolute", home)
	}
	n := normalizer{cwd: filepath.Clean(cwd), home: home}
	fs := &s.Filesystem

	if s.Root == "" {
		s.Root = DefaultRoot
	}
	if s.Tier == "" {
		s.Tier = DefaultTier
	}
	if _, img := s.Image(); s.Root != DefaultRoot && !img {
		s.Root = n.path(s.Root, "root")
	}
	if fs.Workspace == "" {
		fs.Workspace = n.cwd
	} else {
		fs.Workspace = n.path(fs.Workspace, "filesystem.workspace")
	}
	fs.AllowWrite = n.paths(fs.AllowWrite, "filesystem.allow_write")
	fs.AllowWrite = removeAll(fs.AllowWrite, fs.Workspace)
	fs.DenyRead = n.paths(fs.DenyRead, "filesystem.deny_read")
	if !fs.NoDefaultDenies {
		fs.DenyRead = dedupe(append(DefaultDenyRead(home), fs.DenyRead...))
	}
	fs.AllowRead = n.paths(fs.AllowRead, "filesystem.allow_read")
	fs.DenyWrite = n.paths(fs.DenyWrite, "filesystem.deny_write")
	if fs.Home == "" {
		fs.Home = DefaultHome
	}

	nw := &s.Network
	nw.AllowedDomains = dedupe(lower(nw.AllowedDomains))
	nw.DeniedDomains = dedupe(lower(nw.DeniedDomains))
	nw.AllowedCIDRs = dedupe(nw.AllowedCIDRs)
	nw.AllowPrivate = dedupe(nw.AllowPrivate)
	nw.PrivateNames = dedupe(nw.PrivateNames)
	nw.Hosts = dedupe(nw.Hosts)
	for i := range nw.Headers {
		nw.Headers[i].Host = strings.ToLower(nw.Headers[i].Host)
	}
	for i := range s.Secrets {
		sec := &s.Secrets[i]
		sec.Hosts = dedupe(lower(sec.Hosts))
		if sec.From == "" {
			sec.From = "env:" + sec.Name
		}
		if p, ok := strings.CutPrefix(sec.From, "file:"); ok {
			p = n.path(p, fmt.Sprintf("secrets[%d].from", i))
			sec.From = "file:" + p
			// The sandbox may not read the file the real value comes from.
			fs.DenyRead = dedupe(append(fs.DenyRead, p))
		}
	}
	if nw.Mode == "" {
		nw.Mode = DefaultNetworkMode
		if len(nw.AllowedDomains) > 0 || len(nw.AllowedCIDRs) > 0 || len(s.Secrets) > 0 {
			nw.Mode = "proxy"
		}
	}
	s.Env.Pass = dedupe(s.Env.Pass)

	r := &s.Resources
	if r.TmpBytes == 0 {
		r.TmpBytes = DefaultTmpBytes
	}
	if r.Pids == 0 {
		r.Pids = DefaultPids
	}
	return errors.Join(n.errs...)
}

// normalizer expands and cleans paths, collecting errors.
type normalizer struct {
	cwd, home string
	errs      []error
}

func (n *normalizer) path(p, field string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if n.home == "" {
			n.errs = append(n.errs, fieldErrorf("%s: cannot expand %q: home directory unknown", field, p))
			return p
		}
		p = filepath.Join(n.home, p[1:])
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(n.cwd, p)
	}
	return filepath.Clean(p)
}

func (n *normalizer) paths(list []string, field string) []string {
	out := make([]string, 0, len(list))
	for i, p := range list {
		out = append(out, n.path(p, fmt.Sprintf("%s[%d]", field, i)))
	}
	return dedupe(out)
}

// dedupe drops repeated entries, keeping the first; it returns nil for an
// empty list.
func dedupe(list []string) []string {
	var out []string
	seen := make(map[string]bool, len(list))
	for _, s := range list {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func removeAll(list []string, drop string) []string {
	var out []string
	for _, s := range list {
		if s != drop {
			out = append(out, s)
		}
	}
	return out
}

func lower(list []string) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = strings.ToLower(s)
	}
	return out
}

// WritableRoots returns the directories the sandbox may write: the
// workspace, then the allow_write paths. The deny-write names of
// DenyWriteRules apply inside each.
func (s Spec) WritableRoots() []string {
	return dedupe(append([]string{s.Filesystem.Workspace}, s.Filesystem.AllowWrite...))
}

// DenyWriteRules returns what stays read-only inside the writable roots.
// Relative entries are names from DefaultDenyWrite (absent with
// no_default_denies), to be applied below every root of WritableRoots;
// absolute entries are the policy's deny_write paths, applied as they are.
// The sandbox tells the two apart with filepath.IsAbs. Every rule holds
// whether or not the path exists yet; see DefaultDenyWrite for what a rule
// protects, and the exception for GitDirName.
func (s Spec) DenyWriteRules() []string {
	var out []string
	if !s.Filesystem.NoDefaultDenies {
		for _, n := range DefaultDenyWrite() {
			out = append(out, n.Name)
		}
	}
	return append(out, s.Filesystem.DenyWrite...)
}

// systemDir reports whether p is a directory that may never be the
// workspace or an allow_write path: the sandbox could then rewrite the
// host itself (think of `cd / && hutch run`). (A switch, not a map: a
// map literal is built at package initialization, on every start of
// hutch.)
func systemDir(p string) bool {
	switch p {
	case "/", "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/var",
		"/opt", "/srv", "/proc", "/sys", "/dev", "/run":
		return true
	}
	return false
}

// SystemDir reports whether p (clean, absolute) is one of the system
// directories that may be neither the workspace nor an allow_write path.
func SystemDir(p string) bool { return systemDir(p) }

// Validate checks a normalized Spec: the workspace and a non-host root are
// existing directories, every path is absolute, names and domains are well
// formed, and resources are within bounds. It reports every problem found,
// each naming its field, joined in one error that matches ErrInvalid.
func (s Spec) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fieldErrorf(format, args...)) }
	dir := func(field, p string) {
		if fi, err := os.Stat(p); err != nil {
			add("%s: %v", field, unwrapPathError(p, err))
		} else if !fi.IsDir() {
			add("%s: %q is not a directory", field, p)
		}
	}

	ref, isImage := s.Image()
	switch {
	case s.Root == DefaultRoot:
	case isImage:
		if ref == "" || strings.ContainsAny(ref, " \t\n") || len(ref) > 512 {
			add("root: image:REF needs an image reference, got %q", s.Root)
		}
	case !filepath.IsAbs(s.Root):
		add("root: must be %q, an absolute directory or image:REF, got %q", DefaultRoot, s.Root)
	default:
		dir("root", s.Root)
	}

	fs := s.Filesystem
	if !filepath.IsAbs(fs.Workspace) {
		add("filesystem.workspace: must be an absolute path, got %q", fs.Workspace)
	} else if systemDir(fs.Workspace) {
		add("filesystem.workspace: %q would make the host's system files writable; run hutch in a project directory or pass --workspace", fs.Workspace)
	} else {
		dir("filesystem.workspace", fs.Workspace)
	}
	if fs.WorkspaceAt != "" {
		if !isImage {
			add("filesystem.workspace_at: only a sandbox from an image (root: image:REF) has its workspace elsewhere than at its host path (root is %q)", s.Root)
		} else if err := CheckWorkspaceAt(fs.WorkspaceAt); err != nil {
			add("filesystem.workspace_at: %v", err)
		}
	}
	for i, p := range fs.AllowWrite {
		if systemDir(p) {
			add("filesystem.allow_write[%d]: %q would make the host's system files writable", i, p)
		}
	}
	for _, l := range []struct {
		field string
		paths []string
	}{
		{"filesystem.allow_write", fs.AllowWrite},
		{"filesystem.deny_read", fs.DenyRead},
		{"filesystem.allow_read", fs.AllowRead},
		{"filesystem.deny_write", fs.DenyWrite},
	} {
		for i, p := range l.paths {
			if !filepath.IsAbs(p) {
				add("%s[%d]: must be an absolute path, got %q", l.field, i, p)
			} else if err := checkPath(p); err != nil {
				add("%s[%d]: %v", l.field, i, err)
			}
		}
	}

	if err := CheckHome(s.Filesystem.Home); err != nil {
		add("filesystem.home: %v", err)
	}
	if err := CheckWorkspaceMode(s.Filesystem.WorkspaceMode); err != nil {
		add("filesystem.workspace_mode: %v", err)
	}
	if s.Tier != "" {
		if err := CheckTier(s.Tier); err != nil {
			add("tier: %v", err)
		}
		for _, r := range TierRefusals(s) {
			add("%s", r)
		}
	}
	if err := CheckOnUnknown(s.Network.OnUnknown); err != nil {
		add("network.on_unknown: %v", err)
	}
	if _, err := s.Approvals.FileRules(); err != nil {
		add("%v", err)
	}
	if _, err := s.Approvals.ApprovalSet(); err != nil {
		add("approvals: %v", err)
	} else {
		for i, r := range s.Approvals.Commands {
			if err := r.CheckExamples(); err != nil {
				add("approvals.commands[%d]: %v", i, err)
			}
		}
	}
	if err := checkMode(s.Network.Mode); err != nil {
		add("network.mode: %v", err)
	} else if s.Network.Mode == "host" && s.Network.AllowHost != nil && !*s.Network.AllowHost {
		add("network.mode: \"host\" is refused: the policy says network.allow_host: false")
	}
	for _, l := range []struct {
		field string
		list  []string
		check func(string) error
	}{
		{"network.allowed_cidrs", s.Network.AllowedCIDRs, checkCIDRPort},
		{"network.allow_private", s.Network.AllowPrivate, checkCIDR},
		{"network.private_names", s.Network.PrivateNames, checkCIDR},
		{"network.hosts", s.Network.Hosts, checkHostPin},
	} {
		for i, v := range l.list {
			if err := l.check(v); err != nil {
				add("%s[%d]: %v", l.field, i, err)
			}
		}
	}
	for i, d := range s.Network.AllowedDomains {
		if err := checkDomain(d, false); err != nil {
			add("network.allowed_domains[%d]: %v", i, err)
		}
	}
	for i, d := range s.Network.DeniedDomains {
		if err := checkDomain(d, true); err != nil {
			add("network.denied_domains[%d]: %v", i, err)
		}
	}

	names := map[string]int{}
	for i, sec := range s.Secrets {
		at := fmt.Sprintf("secrets[%d]", i)
		if err := checkEnvName(sec.Name, false); err != nil {
			add("%s.name: %v", at, err)
		} else if j, dup := names[sec.Name]; dup {
			add("%s.name: %s is already the name of secrets[%d]", at, sec.Name, j)
		}
		names[sec.Name] = i
		if len(sec.Hosts) == 0 {
			add("%s.hosts: the secret needs at least one host it may be sent to", at)
		}
		for j, h := range sec.Hosts {
			if err := checkSecretHost(h); err != nil {
				add("%s.hosts[%d]: %v", at, j, err)
			}
		}
		if err := checkSecretSource(sec.From); err != nil {
			add("%s.from: %v", at, err)
		} else if p, ok := strings.CutPrefix(sec.From, "file:"); ok && !filepath.IsAbs(p) {
			add("%s.from: must be an absolute path, got %q", at, p)
		}
		if err := checkPlaceholderPrefix(sec.PlaceholderPrefix); err != nil {
			add("%s.placeholder_prefix: %v", at, err)
		}
	}
	checkHeaderRules(s, add)
	if len(s.Secrets) > 0 && s.Network.Mode != "proxy" {
		add("secrets: need network mode \"proxy\" (the proxy puts their values in), got %q", s.Network.Mode)
	}

	for i, name := range s.Env.Pass {
		if err := checkEnvName(name, true); err != nil {
			add("env.pass[%d]: %v", i, err)
		}
	}
	for name, value := range s.Env.Set {
		if err := checkEnvName(name, false); err != nil {
			add("env.set: %v", err)
		} else if strings.ContainsRune(value, 0) {
			add("env.set.%s: value must not contain a NUL byte", name)
		}
	}

	r := s.Resources
	if r.MemoryBytes < 0 || (r.MemoryBytes > 0 && r.MemoryBytes < MinMemoryBytes) {
		add("resources.memory: %s is below the minimum of %s", FormatSize(r.MemoryBytes), FormatSize(MinMemoryBytes))
	}
	if r.TmpBytes < MinTmpBytes {
		add("resources.tmp_size: %s is below the minimum of %s", FormatSize(r.TmpBytes), FormatSize(MinTmpBytes))
	}
	if r.DiskBytes < 0 || (r.DiskBytes > 0 && r.DiskBytes < MinDiskBytes) {
		add("resources.disk: %s is below the minimum of %s", FormatSize(r.DiskBytes), FormatSize(MinDiskBytes))
	}
	if r.Timeout < 0 {
		add("resources.timeout: must not be negative, got %s", r.Timeout)
	}
	if r.Pids < 0 || (r.Pids > 0 && r.Pids < MinPids) {
		add("resources.pids: %d is below the minimum of %d", r.Pids, MinPids)
	}
	if math.IsNaN(r.CPUs) || math.IsInf(r.CPUs, 0) || r.CPUs < 0 {
		add("resources.cpus: must be a positive number, got %v", r.CPUs)
	}
	return errors.Join(errs...)
}

// unwrapPathError words a stat error for a message that already names p.
func unwrapPathError(p string, err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%q does not exist", p)
	}
	return fmt.Errorf("%q: %w", p, unwrapPath(err))
}
