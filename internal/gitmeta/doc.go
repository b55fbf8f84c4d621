// Package gitmeta knows where git takes configuration and commands from,
// so that a sandbox can keep those places out of its commands' reach.
//
// Git runs programs named in its configuration (core.fsmonitor,
// core.sshCommand, filter drivers, credential helpers …) and the hooks of a
// repository, on the user's next git command. A sandbox that may write a
// workspace must therefore not be able to write, or create, any of:
//
//   - in every git directory (a repository's .git, a submodule's directory
//     under .git/modules, a linked worktree's under .git/worktrees): the
//     files and directories of ControlNames — config, config.worktree,
//     commondir (which points git at another directory's config and
//     hooks), hooks and info;
//   - a .git entry itself, which a file ("gitdir: PATH") can point anywhere;
//   - the directories named by core.hooksPath, the files named by
//     include.path and includeIf.*.path, and the programs configuration
//     names by path, wherever they lie.
//
// The package parses git's configuration format (Parse), reads gitlink
// files (ParseGitFile), and classifies configuration variables: Paths lists
// the files and directories a variable makes git read or run, and
// SafeInNewRepository says whether a variable may appear in a repository
// a sandbox created (what git init and git clone write) without running
// anything on the host. It makes no system calls beyond what its callers
// hand it.
package gitmeta
