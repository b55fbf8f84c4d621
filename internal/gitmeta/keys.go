package gitmeta

import (
	"slices"
	"strings"
)

// GitDir is the name of a repository's git directory, or of the gitlink
// file that stands for it, in its worktree.
const GitDir = ".git"

// ControlNames are the entries of a git directory through which git takes
// configuration or commands: its config and per-worktree config, commondir
// (the directory whose config and hooks git then also uses), hooks, and
// info (attributes, excludes and sparse-checkout patterns). A git
// directory's modules and worktrees hold more git directories, each with
// its own control names.
var ControlNames = []string{"config", "config.worktree", "commondir", "hooks", "info"}

// DirControlNames are the control names that are directories.
var DirControlNames = []string{"hooks", "info"}

// PathKind is what git does with a path a variable names.
type PathKind int

const (
	// Program: git runs it.
	Program PathKind = iota
	// Dir: git runs what is in it (core.hooksPath, init.templateDir).
	Dir
	// Include: git reads more configuration from it.
	Include
)

// PathRef is a file or directory a configuration variable makes git run or
// read, as written: absolute, "~/"-relative, or relative (to the including
// file's directory for an Include, else to the directory git runs in).
type PathRef struct {
	Path string
	Kind PathKind
	Var  Var
}

// commandKeys are variables whose value is a command git runs (through the
// shell when it has shell syntax). A "*" stands for any subsection.
var commandKeys = []string{
	"core.fsmonitor", "core.sshcommand", "core.gitproxy", "core.pager", "core.editor", "core.askpass",
	"core.alternaterefscommand", "sequence.editor", "diff.external", "diff.*.command", "diff.*.textconv",
	"filter.*.clean", "filter.*.smudge", "filter.*.process", "merge.*.driver", "credential.helper",
	"credential.*.helper", "gpg.program", "gpg.*.program", "uploadpack.packobjectshook", "pager.*",
	"browser.*.cmd", "browser.*.path", "man.*.cmd", "man.*.path", "difftool.*.cmd", "difftool.*.path",
	"mergetool.*.cmd", "mergetool.*.path", "sendemail.smtpserver", "sendemail.tocmd", "sendemail.cccmd",
	"sendemail.headercmd", "sendemail.sendmailcmd", "remote.*.uploadpack", "remote.*.receivepack",
	"remote.*.proxy", "core.hookspath", "init.templatedir", "include.path", "includeif.*.path",
	"submodule.*.update", "alias.*",
}

// matchKey reports whether v is the variable pattern names ("a.b", or
// "a.*.b" for any subsection, or "a.*" for any name of a section without a
// subsection as well as any subsection's; see commandKeys).
func matchKey(pattern string, v Var) bool {
	sec, rest, _ := strings.Cut(pattern, ".")
	if sec != v.Section {
		return false
	}
	if rest == "*" {
		return true
	}
	if sub, name, ok := strings.Cut(rest, "."); ok {
		return sub == "*" && v.Subsection != "" && name == v.Name
	}
	return v.Subsection == "" && rest == v.Name
}

// Paths lists the files and directories v makes git run or read: the
// directory of core.hooksPath and init.templateDir, the file of
// include.path and includeIf.*.path, and the program at the start of a
// command (a command whose first word has no "/" is looked up in PATH and
// is not listed). Boolean and empty values name nothing.
func Paths(v Var) []PathRef {
	if v.NoValue || v.Value == "" {
		return nil
	}
	switch {
	case matchKey("core.hookspath", v), matchKey("init.templatedir", v):
		return []PathRef{{Path: v.Value, Kind: Dir, Var: v}}
	case matchKey("include.path", v), matchKey("includeif.*.path", v):
		return []PathRef{{Path: v.Value, Kind: Include, Var: v}}
	}
	if !slices.ContainsFunc(commandKeys, func(k string) bool { return matchKey(k, v) }) {
		return nil
	}
	cmd := strings.TrimPrefix(v.Value, "!")
	if isBool(cmd) {
		return nil // core.fsmonitor = true: git's own daemon
	}
	word := firstWord(cmd)
	if !strings.Contains(word, "/") {
		return nil
	}
	return []PathRef{{Path: word, Kind: Program, Var: v}}
}

// RunsCommands reports whether v, in a repository's configuration, can make
// git run a program or read configuration from elsewhere.
func RunsCommands(v Var) bool {
	if matchKey("submodule.*.update", v) {
		return strings.HasPrefix(strings.TrimSpace(v.Value), "!")
	}
	return slices.ContainsFunc(commandKeys, func(k string) bool { return matchKey(k, v) })
}

// firstWord is the program of a shell command: its first word, without
// the quotes around it.
func firstWord(cmd string) string {
	cmd = strings.TrimLeft(cmd, " \t")
	if cmd == "" {
		return ""
	}
	if q := cmd[0]; q == '"' || q == '\'' {
		if end := strings.IndexByte(cmd[1:], q); end >= 0 {
			return cmd[1 : 1+end]
		}
		return cmd[1:]
	}
	if i := strings.IndexAny(cmd, " \t;|&<>()"); i >= 0 {
		return cmd[:i]
	}
	return cmd
}

func isBool(s string) bool {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "false", "yes", "no", "on", "off", "1", "0":
		return true
	}
	return false
}

// safeKeys are the variables a repository made inside a sandbox may set
// and still be used on the host as it is: what git init, git clone, git
// worktree and git submodule write, and settings that change how git
// reads and writes the repository but run nothing and read nothing else.
// "*" stands for any subsection.
var safeKeys = []string{
	"core.repositoryformatversion", "core.filemode", "core.bare", "core.logallrefupdates",
	"core.ignorecase", "core.precomposeunicode", "core.symlinks", "core.autocrlf", "core.eol",
	"core.safecrlf", "core.quotepath", "core.sparsecheckout", "core.sparsecheckoutcone",
	"core.compression", "core.loosecompression", "core.bigfilethreshold", "core.checkstat",
	"core.trustctime", "core.splitindex", "core.untrackedcache", "core.commitgraph",
	"core.multipackindex", "core.abbrev", "core.worktree",
	"remote.*.url", "remote.*.pushurl", "remote.*.fetch", "remote.*.push", "remote.*.mirror",
	"remote.*.tagopt", "remote.*.prune", "remote.*.prunetags", "remote.*.promisor",
	"remote.*.partialclonefilter", "remote.*.skipdefaultupdate", "remote.*.skipfetchall",
	"branch.*.remote", "branch.*.merge", "branch.*.rebase", "branch.*.pushremote", "branch.*.description",
	"extensions.objectformat", "extensions.worktreeconfig", "extensions.partialclone",
	"extensions.preciousobjects", "extensions.refstorage", "extensions.noop",
	"user.name", "user.email", "init.defaultbranch",
	"submodule.*.url", "submodule.*.active", "submodule.*.branch", "submodule.*.shallow",
	"submodule.*.fetchrecursesubmodules", "submodule.*.ignore", "submodule.*.update",
	"lfs.repositoryformatversion", "lfs.url", "lfs.pushurl", "lfs.locksverify",
	"gc.auto", "pull.rebase", "pull.ff", "push.default", "fetch.prune", "index.version",
	"merge.ff", "merge.conflictstyle",
}

// SafeInNewRepository reports whether v may be in the configuration of a
// repository that a sandbox created, without the host's next git command
// there running anything the sandbox chose. It is an allow-list: anything
// it does not know is unsafe.
func SafeInNewRepository(v Var) bool {
	if RunsCommands(v) {
		return false
	}
	return slices.ContainsFunc(safeKeys, func(k string) bool { return matchKey(k, v) })
}
