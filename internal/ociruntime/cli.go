package ociruntime

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// DefaultRoot is where hutch-runc keeps its state when no --root is given
// (runc's is /run/runc). The low-level runtime keeps its own under
// ROOT/runc, hutch-runc its own under ROOT/hutch/ID.
const DefaultRoot = "/run/hutch-runc"

// Version is hutch-runc's version.
var Version = "dev"

// globalValueFlags are runc's global flags that take a value; the others
// (--debug, --systemd-cgroup) take none. runsc's --network is among them
// (the gVisor tier replaces it); runsc's other global flags are read
// right as --name=value only, the spelling gVisor's shim gives them.
var globalValueFlags = map[string]bool{"log": true, "log-format": true, "root": true, "criu": true, "rootless": true, "network": true,
	hutchFlagPolicy: true, hutchFlagPolicyDir: true, hutchFlagUpstreamCA: true, hutchFlagTier: true, hutchFlagRunsc: true}

// hutch-runc's own global flags, which Docker's runtimeArgs can give: the
// node policy a container gets when no annotation names one, the
// directory of the node's policies, a file of certificates the proxy
// trusts besides the system's for the hosts it intercepts (an internal
// CA), the isolation tier (TierGVisor) and the runsc binary of that tier.
// The low-level runtime does not get them.
const (
	hutchFlagPolicy     = "hutch-policy"
	hutchFlagPolicyDir  = "hutch-policy-dir"
	hutchFlagUpstreamCA = "hutch-upstream-ca"
	hutchFlagTier       = "hutch-tier"
	hutchFlagRunsc      = "hutch-runsc"
)

// isHutchFlag reports whether a global flag is hutch-runc's own.
func isHutchFlag(name string) bool {
	switch name {
	case hutchFlagPolicy, hutchFlagPolicyDir, hutchFlagUpstreamCA, hutchFlagTier, hutchFlagRunsc:
		return true
	}
	return false
}

// commandValueFlags are, per command hutch-runc rewrites, the flags of
// runc's that take a value.
// runsc's own, which gVisor's shim (containerd-shim-runsc-v1) gives, are
// among them: --user-log and --fs-restore-image-path of create and run,
// --internal-pid-file of exec.
var commandValueFlags = map[string]map[string]bool{
	"create": {"bundle": true, "b": true, "console-socket": true, "pid-file": true, "preserve-fds": true, "pidfd-socket": true,
		"user-log": true, "fs-restore-image-path": true},
	"run": {"bundle": true, "b": true, "console-socket": true, "pid-file": true, "preserve-fds": true, "pidfd-socket": true,
		"user-log": true, "fs-restore-image-path": true},
	"exec": {"console-socket": true, "pidfd-socket": true, "cwd": true, "env": true, "e": true, "user": true, "u": true,
		"additional-gids": true, "g": true, "process": true, "p": true, "process-label": true, "apparmor": true,
		"pid-file": true, "cap": true, "c": true, "preserve-fds": true, "cgroup": true, "internal-pid-file": true},
}

// flag is one flag of a command line as runc's parser reads it: -name,
// --name, -name=value or --name=value, and, for a flag that takes a
// value, the next argument.
type flag struct {
	name  string
	value string
	// at is the index of the flag's first argument, n how many it spans.
	at, n int
	// inline is true when the value came after "=".
	inline bool
}

// cmdline is a command line of runc: global flags, a command, its flags
// and its positional arguments.
type cmdline struct {
	args    []string
	global  []flag
	command int // index of the command in args; len(args) when none
	flags   []flag
	// rest is the index of the first positional argument after the
	// command's flags (the container's ID).
	rest int
}

// parseFlags reads flags from args[start:] up to the first argument that
// is not one (or "--", which it skips), and returns them and that index.
func parseFlags(args []string, start int, valued map[string]bool) ([]flag, int, error) {
	var out []flag
	i := start
	for i < len(args) {
		a := args[i]
		if a == "--" {
			return out, i + 1, nil
		}
		if len(a) < 2 || a[0] != '-' {
			break
		}
		name := strings.TrimLeft(a, "-")
		f := flag{at: i, n: 1}
		if k, v, ok := strings.Cut(name, "="); ok {
			f.name, f.value, f.inline = k, v, true
		} else {
			f.name = name
			if valued[name] {
				if i+1 >= len(args) {
					return nil, 0, fmt.Errorf("flag %s needs a value", a)
				}
				f.value = args[i+1]
				f.n = 2
			}
		}
		out = append(out, f)
		i += f.n
	}
	return out, i, nil
}

// parseCmdline splits a command line of runc's.
func parseCmdline(args []string) (*cmdline, error) {
	c := &cmdline{args: args}
	var err error
	c.global, c.command, err = parseFlags(args, 0, globalValueFlags)
	if err != nil {
		return nil, err
	}
	c.rest = len(args)
	if c.command < len(args) {
		if valued, ok := commandValueFlags[args[c.command]]; ok {
			c.flags, c.rest, err = parseFlags(args, c.command+1, valued)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", args[c.command], err)
			}
		}
	}
	return c, nil
}

// name is the command, "" when there is none.
func (c *cmdline) name() string {
	if c.command < len(c.args) {
		return c.args[c.command]
	}
	return ""
}

// globalValue is the value of the last global flag named one of names.
func (c *cmdline) globalValue(names ...string) (string, bool) {
	return lastValue(c.global, names)
}

// value is the value of the last flag of the command named one of names.
func (c *cmdline) value(names ...string) (string, bool) {
	return lastValue(c.flags, names)
}

func lastValue(fs []flag, names []string) (string, bool) {
	v, ok := "", false
	for _, f := range fs {
		if slices.Contains(names, f.name) {
			v, ok = f.value, true
		}
	}
	return v, ok
}

// shortFlags are the one-letter names of the command flags hutch-runc
// rewrites.
var shortFlags = map[string]string{"b": "bundle", "p": "process"}

// canonical is a flag's long name.
func canonical(name string) string {
	if long, ok := shortFlags[name]; ok {
		return long
	}
	return name
}

// id is the container's ID: the first positional argument.
func (c *cmdline) id() (string, error) {
	if c.rest >= len(c.args) {
		return "", fmt.Errorf("%s: the container's ID is missing", c.name())
	}
	return c.args[c.rest], nil
}

// rewrite returns the command line with global flag root's value root,
// each command flag named in set given its new value (added before the ID
// when absent), the arguments extra before the ID, and the positional
// arguments after the ID replaced by tail when tail is not nil.
func (c *cmdline) rewrite(root string, set map[string]string, extra, tail []string) []string {
	out := make([]string, 0, len(c.args)+4)
	out = append(out, "--root", root)
	for _, f := range c.global {
		if f.name == "root" || isHutchFlag(f.name) {
			continue
		}
		out = append(out, c.args[f.at:f.at+f.n]...)
	}
	if c.command == len(c.args) {
		return out
	}
	if _, ok := commandValueFlags[c.name()]; !ok {
		return append(out, c.args[c.command:]...)
	}
	out = append(out, c.args[c.command])
	done := map[string]bool{}
	for _, f := range c.flags {
		name := canonical(f.name)
		if v, ok := set[name]; ok {
			if !done[name] {
				out = append(out, "--"+name, v)
				done[name] = true
			}
			continue
		}
		out = append(out, c.args[f.at:f.at+f.n]...)
	}
	for _, name := range slices.Sorted(maps.Keys(set)) {
		if !done[name] {
			out = append(out, "--"+name, set[name])
		}
	}
	out = append(out, extra...)
	if c.rest < len(c.args) {
		out = append(out, "--", c.args[c.rest])
		if tail != nil {
			return append(out, tail...)
		}
		out = append(out, c.args[c.rest+1:]...)
	}
	return out
}
