// Package policy is the one schema for what a hutch sandbox may do: its
// filesystem view, network, environment and resource limits. It loads policy
// files (YAML or JSON) with file:line:column errors, imports the settings
// format of Anthropic's sandbox-runtime, applies safe defaults and validates
// the result. Everything else in hutch consumes a validated Spec.
package policy

import (
	"strings"
	"time"
)

// ImagePrefix starts a Root that names an image.
const ImagePrefix = "image:"

// Image returns the image reference Root names, if it names one.
func (s Spec) Image() (string, bool) {
	return strings.CutPrefix(s.Root, ImagePrefix)
}

// Spec is the complete, effective description of one sandbox.
type Spec struct {
	// Root is "host" (the host's root, read-only), the absolute path of a
	// directory to use as the sandbox's root filesystem (read-only), or
	// "image:REF", an image of hutch's image store (its layers stacked
	// read-only, the sandbox's writes to its root kept in memory).
	Root string `json:"root" yaml:"root"`
	// Tier is the isolation tier the sandbox runs in (one of Tiers):
	// "namespace" (the default) shares the host's kernel behind
	// namespaces, Landlock and seccomp; "gvisor" runs it on gVisor's
	// application kernel (runsc), so that its system calls never reach
	// the host's kernel directly; "microvm" runs it in a virtual machine
	// with a kernel of its own. A field a tier cannot honour is refused
	// (TierRefusals), never dropped.
	Tier string `json:"tier,omitempty" yaml:"tier,omitempty"`
	// Filesystem says what the sandbox may read and write.
	Filesystem Filesystem `json:"filesystem" yaml:"filesystem"`
	// Network says where the sandbox may connect.
	Network Network `json:"network" yaml:"network"`
	// Secrets are credentials the sandbox may use but never hold: it gets
	// a placeholder, and the egress proxy puts the real value in only on
	// requests to the secret's hosts.
	Secrets []Secret `json:"secrets" yaml:"secrets"`
	// Env says which environment variables the sandboxed command gets.
	Env Env `json:"env" yaml:"env"`
	// Resources bounds what the sandbox may consume.
	Resources Resources `json:"resources" yaml:"resources"`
	// Approvals decide whether a command may run at all, before the
	// sandbox limits what it reaches (package approve).
	Approvals Approvals `json:"approvals,omitempty" yaml:"approvals,omitempty"`
	// BestEffort lets hutch run with a layer missing (it prints what it
	// dropped) instead of refusing to run. Off by default: hutch fails closed.
	BestEffort bool `json:"best_effort" yaml:"best_effort"`
}

// Filesystem is the sandbox's view of files. Paths are literal (no
// wildcards); Normalize expands "~" to the invoking user's home directory
// and makes relative paths absolute against the current directory.
type Filesystem struct {
	// Workspace is the directory the command runs in, writable. Default: the
	// current directory.
	Workspace string `json:"workspace" yaml:"workspace"`
	// WorkspaceAt is where the workspace is in the sandbox's view: only
	// for a sandbox from an image (Root "image:REF"), whose view is the
	// image's; hutch run binds it at /workspace unless this says where.
	// With the host's root the workspace is at its host path, and this
	// must be empty.
	WorkspaceAt string `json:"workspace_at,omitempty" yaml:"workspace_at,omitempty"`
	// AllowWrite lists extra writable paths.
	AllowWrite []string `json:"allow_write" yaml:"allow_write"`
	// DenyRead lists paths the sandbox may not read (added to the defaults
	// unless NoDefaultDenies is set).
	DenyRead []string `json:"deny_read" yaml:"deny_read"`
	// AllowRead lists exceptions to DenyRead, including the defaults.
	AllowRead []string `json:"allow_read" yaml:"allow_read"`
	// DenyWrite lists paths inside writable areas that stay read-only, even
	// when they do not exist yet (added to the defaults).
	DenyWrite []string `json:"deny_write" yaml:"deny_write"`
	// NoDefaultDenies drops hutch's built-in deny-read and deny-write lists.
	NoDefaultDenies bool `json:"no_default_denies" yaml:"no_default_denies"`
	// Home is what the sandbox sees as the invoking user's home directory
	// (one of HomeModes), unless the home is itself a writable area:
	// "ro" the real home, read-only, with what the sandbox writes there
	// kept in memory and thrown away at its end; "tmp" an empty home of
	// its own, thrown away at its end; "persist" a home of its own kept
	// between runs, one per workspace. The default deny-read paths are
	// masked in every mode. Default: "ro".
	Home string `json:"home" yaml:"home"`
	// WorkspaceMode is how the sandbox writes its workspace (one of
	// WorkspaceModes): "direct" (the default, also when empty) into the
	// user's files;
	// "review" into a copy-on-write layer over them, kept as a change set
	// that a person looks at and applies (hutch changes), the user's files
	// unchanged until then.
	WorkspaceMode string `json:"workspace_mode,omitempty" yaml:"workspace_mode,omitempty"`
}

// DefaultWorkspaceAt is where hutch run binds the workspace in a sandbox
// from an image when Filesystem.WorkspaceAt does not say.
const DefaultWorkspaceAt = "/workspace"

// The values of Filesystem.WorkspaceMode.
const (
	WorkspaceDirect = "direct"
	WorkspaceReview = "review"
)

// WorkspaceModes are the values of Filesystem.WorkspaceMode.
var WorkspaceModes = []string{WorkspaceDirect, WorkspaceReview}

// HomeModes are the values of Filesystem.Home.
var HomeModes = []string{"ro", "tmp", "persist"}

// DefaultHome is Filesystem.Home's default.
const DefaultHome = "ro"

// Network is the sandbox's network policy. In every mode but "host" the
// sandbox has a network namespace of its own; in "proxy" mode the only way
// out of it is hutch's egress proxy, which enforces the lists below.
type Network struct {
	// Mode is "none" (loopback only), "proxy" (loopback plus hutch's egress
	// proxy) or "host" (the host's network, no isolation). Default: "proxy"
	// when AllowedDomains or AllowedCIDRs is set, else "none".
	Mode string `json:"mode" yaml:"mode"`
	// AllowedDomains lists hosts reachable through the egress proxy:
	// "example.com" (that name only), "*.example.com" (its subdomains
	// only) or an IP address, each with an optional ":PORT" or ":*" (every
	// port); without a port only 80 and 443.
	AllowedDomains []string `json:"allowed_domains" yaml:"allowed_domains"`
	// DeniedDomains lists hosts never reachable, even if allowed above
	// (deny wins); "*" denies every host.
	DeniedDomains []string `json:"denied_domains" yaml:"denied_domains"`
	// AllowedCIDRs lists IP ranges reachable by address ("10.1.0.0/16",
	// optionally ":PORT"; without a port only 80 and 443).
	AllowedCIDRs []string `json:"allowed_cidrs" yaml:"allowed_cidrs"`
	// AllowPrivate lists address ranges (CIDRs) the proxy may connect to
	// although they are loopback, private, link-local or the host's own;
	// by default it refuses them whatever a name resolves to.
	AllowPrivate []string `json:"allow_private" yaml:"allow_private"`
	// PrivateNames lists ranges (CIDRs) of private-use, CGNAT or reserved
	// addresses that allowed host names may resolve to, as srt lets them
	// (an import of srt's settings sets it): an intranet name allowed on
	// purpose. Unlike AllowPrivate it opens nothing to IP addresses, and
	// never loopback, link-local, metadata or the host's own addresses.
	PrivateNames []string `json:"private_names,omitempty" yaml:"private_names,omitempty"`
	// Hosts pins names to addresses in the proxy's resolver, as
	// "NAME:ADDRESS" (like curl --resolve); a pinned name is never looked up.
	Hosts []string `json:"hosts" yaml:"hosts"`
	// AllowHost, when false, refuses mode "host". Nil means true.
	AllowHost *bool `json:"allow_host,omitempty" yaml:"allow_host,omitempty"`
	// Headers set request headers, in the egress proxy, on the sandbox's
	// requests to some hosts: the sandbox never sees them (a value may
	// name a secret: HeaderRule). They allow no host by themselves.
	Headers []HeaderRule `json:"headers,omitempty" yaml:"headers,omitempty"`
	// OnUnknown is what a host no rule allows gets (OnUnknownValues):
	// "deny" (a refusal; also when empty) or "ask" (a person is asked).
	// Parsed and checked only, so far.
	OnUnknown string `json:"on_unknown,omitempty" yaml:"on_unknown,omitempty"`
}

// HeaderRule sets headers on every request of the sandbox to one host
// (Network.Headers). The egress proxy terminates the sandbox's TLS to the
// host, as it does for a secret's host, and sets each header of Set on
// every request, replacing one the sandbox sent.
type HeaderRule struct {
	// Host is the destination, as a secret's host: "api.example.com",
	// "*.example.com", an IP address, with an optional ":PORT" (443 when
	// none).
	Host string `json:"host" yaml:"host"`
	// Set maps header names to values. In a value, "${secrets.NAME}"
	// stands for the real value of the policy's secret NAME, which must be
	// bound to Host (its hosts list Host); "$$" is a "$".
	Set map[string]string `json:"set" yaml:"set"`
}

// Secret is one credential of the sandbox.
type Secret struct {
	// Name is the environment variable that holds the placeholder in the
	// sandbox.
	Name string `json:"name" yaml:"name"`
	// Hosts are the destinations the real value may go to, in the syntax
	// of Network.AllowedDomains; they are reachable through the proxy.
	// Without a port: 443 (and 80 with AllowPlainHTTP).
	Hosts []string `json:"hosts" yaml:"hosts"`
	// From says where hutch reads the real value: "env:NAME" (hutch's own
	// environment; the default is env:<Name>), "file:PATH" (the file's
	// content without a trailing newline; the sandbox may not read it), or
	// SecretFromRequest (hutch serve only: the create request carries it).
	From string `json:"from" yaml:"from"`
	// PlaceholderPrefix starts the placeholder, for clients that check a
	// token's shape (e.g. "sk-ant-", "ghp_").
	PlaceholderPrefix string `json:"placeholder_prefix,omitempty" yaml:"placeholder_prefix,omitempty"`
	// InQuery and InBody allow the real value in the URL's query and in
	// request bodies; it always goes in headers.
	InQuery bool `json:"in_query,omitempty" yaml:"in_query,omitempty"`
	InBody  bool `json:"in_body,omitempty" yaml:"in_body,omitempty"`
	// AllowPlainHTTP allows the real value on plain http:// requests.
	AllowPlainHTTP bool `json:"allow_plain_http,omitempty" yaml:"allow_plain_http,omitempty"`
}

// Env is the sandboxed command's environment: an allow-list of names passed
// from the caller plus explicit values.
type Env struct {
	// Pass lists extra variable names copied from the caller's environment
	// (on top of the built-in safe list, see SafeEnv).
	Pass []string `json:"pass" yaml:"pass"`
	// Set holds explicit NAME=VALUE pairs; they win over passed values.
	Set map[string]string `json:"set" yaml:"set"`
}

// Resources bounds the sandbox. A zero value means "no limit" except where
// Normalize applies a default.
type Resources struct {
	// MemoryBytes is the memory limit of the whole sandbox.
	MemoryBytes int64 `json:"memory" yaml:"memory"`
	// CPUs is the CPU bandwidth limit, in cores (1.5 = one and a half).
	CPUs float64 `json:"cpus" yaml:"cpus"`
	// Pids is the maximum number of processes and threads.
	Pids int64 `json:"pids" yaml:"pids"`
	// Timeout kills the whole sandbox after this long.
	Timeout time.Duration `json:"timeout" yaml:"timeout"`
	// TmpBytes is the size of the sandbox's private /tmp.
	TmpBytes int64 `json:"tmp_size" yaml:"tmp_size"`
	// DiskBytes bounds what a sandbox of hutch serve may write into its
	// root filesystem (its writable layer); 0 is the daemon's default.
	// hutch run, whose root is read-only, has no use for it.
	DiskBytes int64 `json:"disk" yaml:"disk"`
}
