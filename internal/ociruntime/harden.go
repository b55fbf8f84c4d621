package ociruntime

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// InitPath is where a container's view shows hutch-runc's binary: in the
// container's /dev, a tmpfs of the runtime's, so that nothing is added to
// the image's root. InitCommand is the command of that binary that
// confines the container's processes and executes them.
const (
	InitPath    = "/dev/hutch"
	InitCommand = "oci-init"
	// HookCommand is the command of hutch-runc's binary that the
	// low-level runtime runs as the container's hooks.
	HookCommand = "hook"
)

// ErrBadSpec is wrapped by errors about a bundle's configuration that
// hutch-runc cannot harden.
var ErrBadSpec = errors.New("bad container configuration")

// Options says where hutch-runc's pieces are, for Harden.
type Options struct {
	// Binary is the host path of hutch-runc's own binary, bound at
	// InitPath and run as the hooks.
	Binary string
	// StateDir is the container's directory of hutch-runc's state,
	// handed to the hooks.
	StateDir string
	// Tier is the isolation tier: "" for the node's runc, TierGVisor
	// for gVisor's runsc, whose kernel is the container's and which
	// gets no init of hutch's (gVisor has no Landlock).
	Tier string
	// AgentPort, when not 0, makes the container's process hutch's
	// agent listening on that TCP port (AnnotationAgent) in place of
	// the spec's args; the spec's environment, working directory and
	// user stay.
	AgentPort int
}

// TierGVisor is the tier of containers that gVisor's runsc runs.
const TierGVisor = "gvisor"

// Confinement is what hutch's init applies to a container's processes,
// derived from the container's configuration once, at create, and kept
// for the processes `exec` starts in it.
type Confinement struct {
	// Writable are the paths of the container's view under which its
	// processes may write: "/" when the root is writable, and every
	// mount's destination that the spec does not mount read-only.
	Writable []string `json:"writable"`
	// Devices are the device files (and directories of them) on which its
	// processes may use ioctl.
	Devices []string `json:"devices"`
	// Tier is Options.Tier: under gVisor no process gets hutch's init.
	Tier string `json:"tier,omitempty"`
}

// defaultDevices are the devices every OCI container gets (the runtime
// specification's "default devices"), and the terminal's.
var defaultDevices = []string{
	"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom",
	"/dev/tty", "/dev/console", "/dev/ptmx", "/dev/pts",
}

// landlockCalls are the system calls hutch's init makes to confine itself
// on top of the spec's filter; they can only take rights away, so a spec's
// filter that refuses them is made to allow them.
var landlockCalls = []string{
	"landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
	"seccomp", "prctl",
}

// Harden rewrites s, the configuration of the bundle in directory bundle,
// into the one the low-level runtime gets: paths made absolute (the
// rewritten configuration lives in another directory), hutch's init
// ahead of the process, no_new_privs, the init's binary bound in, the
// Landlock and seccomp calls allowed, and hutch's hooks. It returns the
// confinement the init applies.
func Harden(s *specs.Spec, bundle string, o Options) (Confinement, error) {
	var c Confinement
	if s.Process == nil || len(s.Process.Args) == 0 {
		return c, fmt.Errorf("%w: process.args is empty", ErrBadSpec)
	}
	if s.Root == nil || s.Root.Path == "" {
		return c, fmt.Errorf("%w: root.path is empty", ErrBadSpec)
	}
	if s.Linux == nil {
		return c, fmt.Errorf("%w: no linux section (hutch-runc runs Linux containers only)", ErrBadSpec)
	}
	if !filepath.IsAbs(s.Root.Path) {
		s.Root.Path = filepath.Join(bundle, s.Root.Path)
	}
	if !s.Root.Readonly {
		c.Writable = append(c.Writable, "/")
	}
	for i := range s.Mounts {
		m := &s.Mounts[i]
		if !filepath.IsAbs(m.Destination) {
			return c, fmt.Errorf("%w: mount destination %q is not absolute", ErrBadSpec, m.Destination)
		}
		if isBind(*m) && m.Source != "" && !filepath.IsAbs(m.Source) {
			m.Source = filepath.Join(bundle, m.Source)
		}
		if !slices.Contains(m.Options, "ro") && !slices.Contains(c.Writable, "/") {
			c.Writable = append(c.Writable, filepath.Clean(m.Destination))
		}
	}
	if o.Tier == TierGVisor {
		if err := checkGVisorAnnotations(s); err != nil {
			return c, err
		}
	}
	c.Devices = slices.Clone(defaultDevices)
	for _, d := range s.Linux.Devices {
		if !slices.Contains(c.Devices, d.Path) {
			c.Devices = append(c.Devices, d.Path)
		}
	}

	s.Process.NoNewPrivileges = true
	c.Tier = o.Tier
	if o.AgentPort != 0 {
		s.Process.Args = AgentArgs(o.AgentPort)
	}
	if o.Tier != TierGVisor {
		s.Process.Args = c.wrap(s.Process.Args)
		allowConfinement(s.Linux.Seccomp)
	}
	if o.Tier != TierGVisor || o.AgentPort != 0 {
		// Under gVisor the binary is there for the agent alone.
		s.Mounts = append(s.Mounts, specs.Mount{
			Destination: InitPath,
			Type:        "bind",
			Source:      o.Binary,
			Options:     []string{"bind", "ro", "nosuid", "nodev"},
		})
	}

	if s.Hooks == nil {
		s.Hooks = &specs.Hooks{}
	}
	hook := func(event string) specs.Hook {
		return specs.Hook{Path: o.Binary, Args: []string{"hutch-runc", HookCommand, event, o.StateDir}}
	}
	s.Hooks.CreateRuntime = append(s.Hooks.CreateRuntime, hook("createRuntime"))
	s.Hooks.Poststop = append(s.Hooks.Poststop, hook("poststop"))
	return c, nil
}

// AgentCommand is the command of hutch-runc's binary that runs hutch's
// agent (package agent's Main).
const AgentCommand = "agent"

// AgentArgs is the command line of hutch's agent listening on port, on
// every address of the container, IPv4 and IPv6.
func AgentArgs(port int) []string {
	return []string{InitPath, AgentCommand, "--listen", ":" + strconv.Itoa(port)}
}

// HardenProcess rewrites a process that `exec` starts in a container
// whose confinement is c.
func HardenProcess(p *specs.Process, c Confinement) error {
	if len(p.Args) == 0 {
		return fmt.Errorf("%w: the process's args are empty", ErrBadSpec)
	}
	if c.Tier != TierGVisor {
		p.Args = c.wrap(p.Args)
	}
	p.NoNewPrivileges = true
	return nil
}

// wrap puts hutch's init and c ahead of args.
func (c Confinement) wrap(args []string) []string {
	return append(c.InitArgs(), args...)
}

// InitArgs is the command line of hutch's init for c, up to and with the
// "--" after which the container's command follows.
func (c Confinement) InitArgs() []string {
	out := []string{InitPath, InitCommand}
	for _, w := range c.Writable {
		out = append(out, "--write", w)
	}
	for _, d := range c.Devices {
		out = append(out, "--device", d)
	}
	return append(out, "--")
}

// isBind reports whether m is a bind mount, whose source is a path.
func isBind(m specs.Mount) bool {
	return m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind")
}

// allowConfinement makes a seccomp filter that does not allow every call
// by default allow the calls with which hutch's init confines itself.
func allowConfinement(sc *specs.LinuxSeccomp) {
	if sc == nil || sc.DefaultAction == specs.ActAllow {
		return
	}
	sc.Syscalls = append(sc.Syscalls, specs.LinuxSyscall{
		Names:  slices.Clone(landlockCalls),
		Action: specs.ActAllow,
	})
}

// parseInitArgs reads the command line InitArgs made.
func parseInitArgs(args []string) (Confinement, []string, error) {
	var c Confinement
	for i := 0; i < len(args); i++ {
		switch a := args[i]; a {
		case "--":
			if i+1 == len(args) || args[i+1] == "" {
				return c, nil, errors.New("no command after --")
			}
			return c, args[i+1:], nil
		case "--write", "--device":
			if i+1 == len(args) || !strings.HasPrefix(args[i+1], "/") {
				return c, nil, fmt.Errorf("%s wants an absolute path", a)
			}
			i++
			if a == "--write" {
				c.Writable = append(c.Writable, args[i])
			} else {
				c.Devices = append(c.Devices, args[i])
			}
		default:
			return c, nil, fmt.Errorf("unknown argument %q", a)
		}
	}
	return c, nil, errors.New("no -- and command")
}
