package policy

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
)

// PathGroup is a group of the default deny-read list: what the paths are,
// and the paths.
type PathGroup struct {
	What  string
	Paths []string
}

// homeDenyRead lists credential, key, token and history files relative to
// the invoking user's home directory. The sandbox may not read them. The
// list is grouped by kind; README.md documents it, and a test keeps the two
// in step.
var homeDenyRead = []PathGroup{
	{What: "Login, signing and encryption keys", Paths: []string{
		".ssh", ".gnupg", ".pki", ".config/sops", ".config/age",
	}},
	{What: "Keyrings and password managers", Paths: []string{
		".password-store", ".local/share/keyrings", ".local/share/kwalletd", ".config/op", ".op",
		".config/Bitwarden CLI", ".config/Bitwarden", ".lastpass", ".local/share/lpass",
		".local/share/gopass", ".config/gopass", ".local/share/python_keyring",
	}},
	{What: "Cloud, cluster and infrastructure tools", Paths: []string{
		".aws", ".azure", ".config/gcloud", ".gsutil", ".oci", ".config/doctl", ".config/hcloud",
		".config/scw", ".config/linode-cli", ".fly", ".config/exoscale", ".ibmcloud", ".aliyun",
		".config/openstack", ".kube", ".minikube", ".talos", ".config/helm/registry", ".docker",
		".config/containers/auth.json", ".terraform.d", ".terraformrc", ".pulumi/credentials.json",
		".vault-token", ".config/rclone", ".s3cfg", ".boto", ".wrangler", ".config/.wrangler",
		".local/share/com.vercel.cli", ".netlify", ".config/netlify", ".config/configstore",
		".databrickscfg", ".snowflake", ".dbt/profiles.yml", ".kaggle", ".sentryclirc",
		".circleci/cli.yml", ".config/heroku", ".smbcredentials",
	}},
	{What: "Code forges and version control", Paths: []string{
		".config/gh", ".config/hub", ".config/glab-cli", ".config/tea", ".git-credentials",
		".config/git/credentials", ".netrc", ".authinfo", ".authinfo.gpg", ".subversion/auth",
	}},
	{What: "Package registries and build tools", Paths: []string{
		".npmrc", ".yarnrc", ".yarnrc.yml", ".pypirc", ".config/pypoetry/auth.toml",
		".cargo/credentials", ".cargo/credentials.toml", ".gem/credentials", ".bundle/config",
		".m2/settings.xml", ".m2/settings-security.xml", ".gradle/gradle.properties",
		".ivy2/.credentials", ".sbt/credentials", ".composer/auth.json", ".config/composer/auth.json",
		".nuget/NuGet/NuGet.Config", ".config/NuGet/NuGet.Config", ".pub-cache/credentials.json",
		".config/dart/pub-credentials.json", ".hex/hex.config",
	}},
	{What: "Database clients", Paths: []string{
		".pgpass", ".my.cnf", ".mylogin.cnf", ".rediscli_auth", ".cassandra/cqlshrc",
		".influxdbv2/configs", ".local/share/DBeaverData",
	}},
	{What: "AI tools and coding agents", Paths: []string{
		".claude/.credentials.json", ".claude.json", ".codex/auth.json", ".config/github-copilot",
		".gemini/oauth_creds.json", ".gemini/google_accounts.json", ".qwen/oauth_creds.json",
		".cache/huggingface/token", ".huggingface/token", ".local/share/opencode/auth.json",
		".local/share/amp", ".config/goose/secrets.yaml", ".codeium", ".ollama/id_ed25519",
		".aider.conf.yml", ".continue/config.json", ".continue/config.yaml",
	}},
	{What: "Browser profiles (cookies, saved passwords, session tokens)", Paths: []string{
		".mozilla", ".librewolf", ".config/google-chrome", ".config/google-chrome-beta",
		".config/google-chrome-unstable", ".config/chromium", ".config/BraveSoftware",
		".config/microsoft-edge", ".config/vivaldi", ".config/opera", "snap/firefox", "snap/chromium",
		".var/app",
	}},
	{What: "Mail and chat", Paths: []string{
		".thunderbird", ".msmtprc", ".fetchmailrc", ".mbsyncrc", ".muttrc", ".mutt", ".purple",
		".config/Slack", ".config/discord", ".config/Signal", ".local/share/TelegramDesktop",
	}},
	{What: "Desktop session secrets", Paths: []string{
		".Xauthority", ".ICEauthority", ".vnc/passwd",
	}},
	{What: "Shell and REPL histories, which often hold pasted tokens", Paths: []string{
		".bash_history", ".zsh_history", ".zhistory", ".histfile", ".sh_history", ".python_history",
		".node_repl_history", ".psql_history", ".mysql_history", ".sqlite_history",
		".rediscli_history", ".dbshell", ".mongosh", ".irb_history", ".pry_history", ".Rhistory",
		".lesshst", ".ipython", ".julia/logs", ".local/share/atuin", ".config/fish/fish_history",
		".local/share/fish/fish_history",
	}},
	{What: "hutch's own: homes it keeps for other workspaces' sandboxes (--home persist), and an ordinary user's image store (a sandbox that wrote a layer there would run in every sandbox of that image)", Paths: []string{
		".local/state/hutch", ".local/share/hutch",
	}},
	{What: "A dotenv file kept directly in the home directory", Paths: []string{
		".env",
	}},
}

// systemDenyRead lists host paths the sandbox may not read.
var systemDenyRead = []PathGroup{
	{What: "Per-user runtime directories (session bus, ssh and gpg agents, Wayland, PulseAudio), which act as the user outside the sandbox", Paths: []string{
		"/run/user",
	}},
	{What: "hutch serve's admin socket and state (its default paths)", Paths: []string{
		"/run/hutch", "/var/lib/hutch",
	}},
	{What: "Container, VM and build daemons, which are root on the host", Paths: []string{
		"/var/run/docker.sock", "/run/docker.sock", "/run/docker", "/var/run/docker",
		"/run/containerd", "/var/run/containerd", "/run/k3s",
		"/run/podman", "/run/crio", "/var/run/crio", "/var/run/cri-dockerd.sock", "/run/buildkit",
		"/run/libvirt", "/var/run/libvirt", "/var/snap/lxd/common/lxd", "/var/lib/lxd/unix.socket",
		"/var/lib/incus/unix.socket", "/run/incus",
	}},
	{What: "System services that act on a caller's behalf", Paths: []string{
		"/run/dbus/system_bus_socket", "/var/run/dbus/system_bus_socket",
		"/run/snapd.socket", "/run/snapd-snap.socket", "/run/systemd/private", "/run/systemd/journal",
		"/run/systemd/userdb", "/run/systemd/io.system.ManagedOOM", "/run/polkit", "/run/cups",
		"/run/avahi-daemon",
	}},
	{What: "The X server, which lets any client read keystrokes and the screen", Paths: []string{
		"/tmp/.X11-unix",
	}},
	{What: "Secrets mounted for a container or pod (Docker secrets, Kubernetes service account tokens)", Paths: []string{
		"/run/secrets", "/var/run/secrets",
	}},
	{What: "Password hashes, sudo rules, TLS keys", Paths: []string{
		"/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/sudoers.d", "/etc/ssl/private",
	}},
	{What: "SSH host private keys (the public keys and ssh_config stay readable)", Paths: []string{
		"/etc/ssh/ssh_host_rsa_key", "/etc/ssh/ssh_host_ecdsa_key",
		"/etc/ssh/ssh_host_ed25519_key", "/etc/ssh/ssh_host_dsa_key",
	}},
}

// DefaultDenyRead returns the absolute paths the sandbox may not read unless
// the policy sets no_default_denies: the credential and history files under
// home (skipped when home is empty or relative), and host daemon sockets and
// system secrets.
func DefaultDenyRead(home string) []string {
	var out []string
	if home != "" && filepath.IsAbs(home) {
		for _, g := range homeDenyRead {
			for _, p := range g.Paths {
				out = append(out, filepath.Join(home, p))
			}
		}
	}
	for _, g := range systemDenyRead {
		out = append(out, g.Paths...)
	}
	return out
}

// Protection is how a default protected name is kept from the sandbox.
type Protection int

const (
	// Prevent: the name is read-only inside every writable area whether or
	// not it exists; a missing one is held by a placeholder while the
	// sandbox runs, so it cannot be created.
	Prevent Protection = iota
	// SetAside: the name is read-only while it exists; one the sandbox
	// creates is renamed (NAME.hutch-set-aside) when the sandbox ends, so
	// that nothing runs it until a person has looked at it. Used for the
	// configuration of tools that read it when they start, where a
	// placeholder for every name in every workspace would cost each sandbox
	// more than it protects.
	SetAside
)

// ProtectedName is one default deny-write name.
type ProtectedName struct {
	Name     string     // relative to each writable area
	HomeOnly bool       // only when the writable area is the home directory
	How      Protection // when it does not exist
	Why      string     // what runs it, for the documentation and reports
}

// defaultDenyWrite lists names, relative to each writable area, that stay
// read-only inside it. Each protects the entry and everything under it. A
// writable area is the workspace, every allow_write path, and so the home
// directory when it is one of those; the home-only names matter only then.
// Beyond these names, the sandbox protects every git directory it finds in
// a writable area (see package gitmeta).
var defaultDenyWrite = []ProtectedName{
	// Shell startup files: their code runs in the user's next shell.
	{Name: ".bashrc", Why: "bash"}, {Name: ".bash_profile", Why: "bash"}, {Name: ".bash_login", Why: "bash"},
	{Name: ".bash_logout", Why: "bash"}, {Name: ".profile", Why: "login shells"}, {Name: ".zshrc", Why: "zsh"},
	{Name: ".zprofile", Why: "zsh"}, {Name: ".zshenv", Why: "zsh"}, {Name: ".zlogin", Why: "zsh"},
	{Name: ".zlogout", Why: "zsh"}, {Name: ".config/fish", HomeOnly: true, Why: "fish"},
	// Git: hooks and config run code on the user's next git command, and
	// .gitmodules points submodules elsewhere. ".git" itself is listed so
	// that the sandbox can neither replace nor move an existing .git; this
	// rule protects the entry only, the objects, refs and index under an
	// existing .git stay writable so that git works. Where there is no
	// repository, the .git names are not held: the sandbox may make one
	// (git init), which is inspected when it ends and set aside if it
	// would run commands. The rest of every git directory
	// (config.worktree, commondir, info, submodules, worktrees,
	// core.hooksPath) is protected from what the sandbox finds there.
	{Name: ".git/hooks", Why: "git hooks"}, {Name: ".git/config", Why: "git"},
	{Name: ".gitmodules", Why: "git submodules"}, {Name: GitDirName, Why: "git"},
	// Editor, agent and tool config that runs code or adds tools when the
	// user opens the project.
	{Name: ".vscode", Why: "VS Code tasks, settings and MCP servers"},
	{Name: ".idea", Why: "JetBrains IDEs run configurations"},
	{Name: ".mcp.json", Why: "MCP servers of Claude Code and others"},
	{Name: ".claude", Why: "Claude Code hooks and settings"},
	{Name: ".codex", Why: "Codex settings"},
	{Name: ".cursor", Why: "Cursor MCP servers and rules"},
	{Name: ".envrc", Why: "direnv"}, {Name: ".ripgreprc", Why: "ripgrep"},
	// Session autostart (home only).
	{Name: ".config/autostart", HomeOnly: true, Why: "desktop session autostart"},
	{Name: ".config/systemd/user", HomeOnly: true, Why: "systemd user units"},
	// Home-only files that grant access or redirect tools.
	{Name: ".gitconfig", HomeOnly: true, Why: "git"}, {Name: ".ssh/authorized_keys", HomeOnly: true, Why: "sshd"},
	{Name: ".npmrc", HomeOnly: true, Why: "npm"}, {Name: ".pypirc", HomeOnly: true, Why: "twine"},

	// Coding agents' project settings: MCP servers, hooks, tool commands.
	{Name: ".gemini", How: SetAside, Why: "Gemini CLI settings and MCP servers"},
	{Name: ".qwen", How: SetAside, Why: "Qwen Code settings and MCP servers"},
	{Name: ".amazonq", How: SetAside, Why: "Amazon Q MCP servers"},
	{Name: ".roo", How: SetAside, Why: "Roo Code MCP servers"},
	{Name: ".roomodes", How: SetAside, Why: "Roo Code modes"},
	{Name: ".kilocode", How: SetAside, Why: "Kilo Code MCP servers"},
	{Name: ".kiro", How: SetAside, Why: "Kiro hooks and MCP servers"},
	{Name: ".continue", How: SetAside, Why: "Continue MCP servers and commands"},
	{Name: ".windsurf", How: SetAside, Why: "Windsurf workflows and MCP servers"},
	{Name: ".junie", How: SetAside, Why: "Junie MCP servers"},
	{Name: ".augment", How: SetAside, Why: "Augment settings"},
	{Name: ".opencode", How: SetAside, Why: "opencode commands and plugins"},
	{Name: "opencode.json", How: SetAside, Why: "opencode MCP servers"},
	{Name: "opencode.jsonc", How: SetAside, Why: "opencode MCP servers"},
	{Name: ".crush.json", How: SetAside, Why: "Crush MCP servers and LSPs"},
	{Name: "crush.json", How: SetAside, Why: "Crush MCP servers and LSPs"},
	{Name: ".aider.conf.yml", How: SetAside, Why: "aider (lint and test commands)"},
	{Name: ".goose", How: SetAside, Why: "goose settings"},
	{Name: ".trae", How: SetAside, Why: "Trae MCP servers"},
	// Editors: tasks, language servers and project scripts they start.
	{Name: ".zed", How: SetAside, Why: "Zed tasks and language servers"},
	{Name: ".fleet", How: SetAside, Why: "Fleet run configurations"},
	{Name: ".helix", How: SetAside, Why: "Helix language servers"},
	{Name: ".theia", How: SetAside, Why: "Theia tasks"},
	{Name: ".nvim.lua", How: SetAside, Why: "Neovim exrc"}, {Name: ".nvimrc", How: SetAside, Why: "Neovim exrc"},
	{Name: ".exrc", How: SetAside, Why: "vi exrc"},
	{Name: ".devcontainer", How: SetAside, Why: "dev container commands"},
	{Name: ".devcontainer.json", How: SetAside, Why: "dev container commands"},
	// Git tooling: hook managers and the hooks they install.
	{Name: ".pre-commit-config.yaml", How: SetAside, Why: "pre-commit"},
	{Name: ".husky", How: SetAside, Why: "husky git hooks"},
	{Name: ".githooks", How: SetAside, Why: "git hooks (core.hooksPath)"},
	{Name: ".git-hooks", How: SetAside, Why: "git hooks (core.hooksPath)"},
	{Name: "lefthook.yml", How: SetAside, Why: "lefthook"}, {Name: "lefthook.yaml", How: SetAside, Why: "lefthook"},
	{Name: "lefthook.toml", How: SetAside, Why: "lefthook"}, {Name: "lefthook.json", How: SetAside, Why: "lefthook"},
	{Name: ".lefthook.yml", How: SetAside, Why: "lefthook"}, {Name: ".lefthook.yaml", How: SetAside, Why: "lefthook"},
	{Name: ".lefthook.toml", How: SetAside, Why: "lefthook"}, {Name: ".lefthook.json", How: SetAside, Why: "lefthook"},
	{Name: "lefthook-local.yml", How: SetAside, Why: "lefthook"}, {Name: ".lefthook-local.yml", How: SetAside, Why: "lefthook"},
	{Name: ".lefthook", How: SetAside, Why: "lefthook scripts"},
	{Name: ".overcommit.yml", How: SetAside, Why: "overcommit"},
	{Name: ".simple-git-hooks.json", How: SetAside, Why: "simple-git-hooks"},
	{Name: ".simple-git-hooks.js", How: SetAside, Why: "simple-git-hooks"},
	{Name: ".simple-git-hooks.cjs", How: SetAside, Why: "simple-git-hooks"},
	// Environment managers that run code when a shell enters the directory.
	{Name: "mise.toml", How: SetAside, Why: "mise hooks and tasks"}, {Name: ".mise.toml", How: SetAside, Why: "mise hooks and tasks"},
	{Name: "mise.local.toml", How: SetAside, Why: "mise hooks and tasks"}, {Name: ".mise.local.toml", How: SetAside, Why: "mise hooks and tasks"},
	{Name: ".mise", How: SetAside, Why: "mise tasks"}, {Name: ".config/mise", How: SetAside, Why: "mise hooks and tasks"},
	{Name: ".autoenv.zsh", How: SetAside, Why: "zsh-autoenv"}, {Name: ".autoenv_leave.zsh", How: SetAside, Why: "zsh-autoenv"},
	// Debuggers and REPLs that run a startup file from the current directory.
	{Name: ".pdbrc", How: SetAside, Why: "pdb"}, {Name: ".irbrc", How: SetAside, Why: "irb"},
	{Name: ".gdbinit", How: SetAside, Why: "gdb"}, {Name: ".lldbinit", How: SetAside, Why: "lldb"},
	{Name: ".Rprofile", How: SetAside, Why: "R"},
	// Home only: what the user's shell, editor and tools run next.
	{Name: ".config/git", HomeOnly: true, How: SetAside, Why: "git"},
	{Name: ".ssh/config", HomeOnly: true, How: SetAside, Why: "ssh (ProxyCommand)"},
	{Name: ".ssh/rc", HomeOnly: true, How: SetAside, Why: "sshd"},
	{Name: ".bashrc.d", HomeOnly: true, How: SetAside, Why: "bash"},
	{Name: ".config/environment.d", HomeOnly: true, How: SetAside, Why: "systemd user environment"},
	{Name: ".local/share/systemd/user", HomeOnly: true, How: SetAside, Why: "systemd user units"},
	{Name: ".config/nvim", HomeOnly: true, How: SetAside, Why: "Neovim"},
	{Name: ".vimrc", HomeOnly: true, How: SetAside, Why: "Vim"}, {Name: ".vim", HomeOnly: true, How: SetAside, Why: "Vim"},
	{Name: ".emacs", HomeOnly: true, How: SetAside, Why: "Emacs"}, {Name: ".emacs.d", HomeOnly: true, How: SetAside, Why: "Emacs"},
	{Name: ".tmux.conf", HomeOnly: true, How: SetAside, Why: "tmux"},
	{Name: ".config/starship.toml", HomeOnly: true, How: SetAside, Why: "starship prompt commands"},
	{Name: ".config/direnv", HomeOnly: true, How: SetAside, Why: "direnv"},
	{Name: ".psqlrc", HomeOnly: true, How: SetAside, Why: "psql"}, {Name: ".sqliterc", How: SetAside, HomeOnly: true, Why: "sqlite3"},
	{Name: ".xinitrc", HomeOnly: true, How: SetAside, Why: "X session"}, {Name: ".xsession", HomeOnly: true, How: SetAside, Why: "X session"},
	{Name: ".xprofile", HomeOnly: true, How: SetAside, Why: "X session"},
	{Name: ".local/bin", HomeOnly: true, How: SetAside, Why: "programs on the user's PATH"},
	{Name: "bin", HomeOnly: true, How: SetAside, Why: "programs on the user's PATH"},
}

// GitDirName is the one default deny-write name whose rule protects only
// the entry itself, not what is under it (see DefaultDenyWrite).
const GitDirName = ".git"

// DefaultDenyWrite returns the names, relative to each writable area, that
// stay read-only unless the policy sets no_default_denies. Every name
// protects the path and all below it, except GitDirName, which protects
// only the entry: no .git may be created, removed or swapped, while the
// contents of an existing one stay writable. A Prevent name holds whether
// or not it exists; a SetAside name holds while it exists, and one the
// sandbox creates is set aside when it ends.
func DefaultDenyWrite() []ProtectedName {
	return slices.Clone(defaultDenyWrite)
}

// SetAsideSuffix is added to the name of what hutch sets aside.
const SetAsideSuffix = ".hutch-set-aside"

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
