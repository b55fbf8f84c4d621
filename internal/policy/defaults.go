package policy

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
)

// homeDenyRead lists credential, key and history files relative to the
// invoking user's home directory. The sandbox may not read them.
var homeDenyRead = []string{
	// Login, signing and keyring secrets.
	".ssh", ".gnupg", ".password-store", ".local/share/keyrings",
	// Cloud, cluster and infrastructure credentials.
	".aws", ".azure", ".config/gcloud", ".kube", ".docker", ".config/containers/auth.json",
	".terraform.d", ".vault-token", ".config/rclone", ".s3cfg", ".boto",
	// Code forges and package registries.
	".config/gh", ".config/hub", ".git-credentials", ".netrc",
	".npmrc", ".pypirc", ".cargo/credentials", ".cargo/credentials.toml", ".gem/credentials", ".m2/settings.xml",
	// Password manager CLI sessions.
	".config/op",
	// Shell and REPL histories, which often hold pasted tokens.
	".bash_history", ".zsh_history", ".python_history", ".node_repl_history", ".psql_history",
	".mysql_history", ".lesshst", ".config/fish/fish_history", ".local/share/fish/fish_history",
	// A dotenv file kept directly in the home directory.
	".env",
}

// systemDenyRead lists host paths the sandbox may not read.
var systemDenyRead = []string{
	// Per-user runtime directories: session bus, ssh and gpg agents, Wayland,
	// PulseAudio; any of them can act as the user outside the sandbox.
	"/run/user",
	// Container and VM daemons: talking to them is root on the host.
	"/var/run/docker.sock", "/run/docker.sock",
	"/run/containerd", "/var/run/containerd",
	"/run/podman", "/run/crio", "/var/run/crio",
	"/run/libvirt", "/var/run/libvirt",
	// System services that act on a caller's behalf.
	"/run/dbus/system_bus_socket", "/var/run/dbus/system_bus_socket",
	"/run/snapd.socket", "/run/systemd/private", "/run/systemd/journal",
	// The X server, which lets any client read keystrokes and the screen.
	"/tmp/.X11-unix",
	// Password hashes and sudo rules.
	"/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/sudoers.d",
	// SSH host private keys (the public keys and ssh_config stay readable).
	"/etc/ssh/ssh_host_rsa_key", "/etc/ssh/ssh_host_ecdsa_key",
	"/etc/ssh/ssh_host_ed25519_key", "/etc/ssh/ssh_host_dsa_key",
}

// DefaultDenyRead returns the absolute paths the sandbox may not read unless
// the policy sets no_default_denies: the credential and history files under
// home (skipped when home is empty or relative), and host daemon sockets and
// system secrets.
func DefaultDenyRead(home string) []string {
	out := make([]string, 0, len(homeDenyRead)+len(systemDenyRead))
	if home != "" && filepath.IsAbs(home) {
		for _, p := range homeDenyRead {
			out = append(out, filepath.Join(home, p))
		}
	}
	return append(out, systemDenyRead...)
}

// defaultDenyWrite lists names, relative to each writable area, that stay
// read-only inside it. Each protects the entry and everything under it,
// and the sandbox may not create it where it does not exist. A writable
// area is the workspace, every allow_write path, and so the home directory
// when it is one of those; the home-only names matter only then.
var defaultDenyWrite = []string{
	// Shell startup files: their code runs in the user's next shell.
	".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile",
	".zshrc", ".zprofile", ".zshenv", ".zlogin", ".zlogout", ".config/fish",
	// Git: hooks and config run code on the user's next git command, and
	// .gitmodules points submodules elsewhere. ".git" itself is listed so
	// the sandbox can neither create a repository where none exists nor
	// replace or move an existing .git; this rule protects the entry only,
	// the objects, refs and index under an existing .git stay writable so
	// that git works. Hooks and config stay protected by their own rules.
	".git/hooks", ".git/config", ".gitmodules", ".git",
	// Editor, agent and tool config that runs code or adds tools when the
	// user opens the project.
	".vscode", ".idea", ".mcp.json", ".claude", ".codex", ".cursor", ".envrc", ".ripgreprc",
	// Session autostart (home only).
	".config/autostart", ".config/systemd/user",
	// Home-only files that grant access or redirect tools.
	".gitconfig", ".ssh/authorized_keys", ".npmrc", ".pypirc",
}

// GitDirName is the one default deny-write name whose rule protects only
// the entry itself, not what is under it (see DefaultDenyWrite).
const GitDirName = ".git"

// DefaultDenyWrite returns the names, relative to each writable area, that
// stay read-only unless the policy sets no_default_denies. Every name
// protects the path and all below it, whether it exists or not, except
// GitDirName, which protects only the entry: no .git may be created, removed
// or swapped, while the contents of an existing one stay writable.
func DefaultDenyWrite() []string {
	return slices.Clone(defaultDenyWrite)
}

// SafeEnv lists the environment variables passed from the caller to every
// sandbox: names, or prefixes ending in "*". Anything else must be named in
// env.pass. PWD is not passed: the runner sets it to the working directory.
var SafeEnv = []string{
	"PATH", "HOME", "USER", "LOGNAME", "SHELL",
	"LANG", "LANGUAGE", "LC_*", "TZ",
	"TERM", "COLORTERM", "NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES",
}

// BuildEnv returns the sandboxed command's environment: the variables of
// environ ("NAME=value" entries, e.g. os.Environ()) whose names match
// SafeEnv or e.Pass (exactly, or by prefix for an entry ending in "*"),
// then e.Set on top. Nothing else is passed. When environ has a name twice
// the first wins, as in getenv. The result is sorted by name.
func BuildEnv(e Env, environ []string) []string {
	allowed := append(slices.Clone(SafeEnv), e.Pass...)
	vars := make(map[string]string)
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			continue
		}
		if _, seen := vars[name]; seen || !matchEnv(name, allowed) {
			continue
		}
		vars[name] = value
	}
	for name, value := range e.Set {
		vars[name] = value
	}
	out := make([]string, 0, len(vars))
	for _, name := range slices.Sorted(maps.Keys(vars)) {
		out = append(out, name+"="+vars[name])
	}
	return out
}

// matchEnv reports whether name matches one of patterns.
func matchEnv(name string, patterns []string) bool {
	for _, p := range patterns {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if prefix != "" && strings.HasPrefix(name, prefix) {
				return true
			}
		} else if p == name {
			return true
		}
	}
	return false
}
