package ociruntime

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/landlock"
	"github.com/hutch-sandbox/hutch/internal/proxyconnect"
	"github.com/hutch-sandbox/hutch/internal/seccomp"
)

// RuntimeEnv names the environment variable that gives the low-level
// runtime's path; without it hutch-runc takes runc, else crun, from PATH.
const RuntimeEnv = "HUTCH_RUNC_RUNTIME"

// maxConfig bounds a bundle's config.json and a process.json.
const maxConfig = 16 << 20

// Main runs hutch-runc with args (without the program's name) and returns
// its exit status when it did not hand over to the low-level runtime.
func Main(args []string, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case InitCommand:
			return initMain(args[1:], stderr)
		case AgentCommand:
			// hutch's agent as a container's process (AnnotationAgent).
			return agent.Main(args[1:], stderr)
		case HookCommand:
			return hookMain(args[1:], os.Stdin, stderr)
		case ProxyCommand:
			return proxyMain(args[1:], stderr)
		case InstallCommand, UninstallCommand:
			return installMain(args[0], args[1:], os.Stdout, stderr)
		case "proxy-connect":
			// ssh's ProxyCommand in a container (GIT_SSH_COMMAND).
			return proxyconnect.Main(args[1:], os.Stdin, os.Stdout, stderr)
		}
	}
	cl, err := parseCmdline(args)
	if err != nil {
		return fail(nil, stderr, err)
	}
	tier, _ := cl.globalValue(hutchFlagTier)
	if tier == "" && filepath.Base(os.Args[0]) == GVisorName {
		tier = TierGVisor
	}
	// check --host checks the node's runtime from a pod that has the
	// node's root mounted there.
	var host *Installation
	if cl.name() == CheckCommand {
		if host, err = checkFlags(cl.args[cl.command+1:]); err != nil {
			return fail(cl, stderr, err)
		}
	}
	var backend string
	switch {
	case tier != "" && tier != TierGVisor:
		err = fmt.Errorf("--%s %q: the tiers are %s (and the node's runc without the flag)", hutchFlagTier, tier, TierGVisor)
	case host != nil:
		backend, err = hostRuntime(host.Host, tier, cl)
	case tier == "":
		backend, err = lowLevelRuntime()
	default:
		backend, err = gvisorRuntime(cl)
	}
	if err != nil {
		return fail(cl, stderr, err)
	}
	root := DefaultRoot
	if v, ok := cl.globalValue("root"); ok {
		root = v
	}
	if root, err = filepath.Abs(root); err != nil {
		return fail(cl, stderr, err)
	}
	r := &runtime{root: root, backend: backend, policyDir: DefaultPolicyDir, tier: tier}
	r.policy, _ = cl.globalValue(hutchFlagPolicy)
	if v, ok := cl.globalValue(hutchFlagUpstreamCA); ok {
		if r.upstreamCA, err = filepath.Abs(v); err != nil {
			return fail(cl, stderr, err)
		}
	}
	if v := os.Getenv(PolicyDirEnv); v != "" {
		r.policyDir = v
	}
	if v, ok := cl.globalValue(hutchFlagPolicyDir); ok {
		r.policyDir = v
	}
	switch cl.name() {
	case CheckCommand:
		if host != nil {
			r.host = host
			r.policyDir = filepath.Join(host.Host, r.policyDir)
		}
		return r.checkMain(os.Stdout)
	case "", "--version", "-v", "version":
		if cl.name() != "" || versionAsked(cl) {
			return r.version(os.Stdout, stderr)
		}
	}
	out, err := r.backendArgs(cl)
	if err != nil {
		return fail(cl, stderr, err)
	}
	if cl.name() == "create" {
		return r.runCreate(cl, out, stderr)
	}
	err = unix.Exec(backend, append([]string{filepath.Base(backend)}, out...), os.Environ())
	return fail(cl, stderr, fmt.Errorf("run %s: %w", backend, err))
}

// backendArgs is command's command line, with, under the gVisor tier,
// runsc's --network=host in place of any --network of cl's (a runsc_config
// of gVisor's shim).
func (r *runtime) backendArgs(cl *cmdline) ([]string, error) {
	if r.tier == TierGVisor {
		cl.global = slices.DeleteFunc(cl.global, func(f flag) bool { return f.name == "network" })
	}
	out, err := r.command(cl)
	if err != nil || r.tier != TierGVisor {
		return out, err
	}
	// gVisor's kernel uses the container's network namespace's own
	// stack (its sockets are the namespace's): the firewall and the
	// proxy's listeners there apply to it as to a container of runc.
	// Every command gets it: runsc's start sets up the sandbox's network
	// by its own flags, and without it would move the namespace's
	// addresses into a stack of gVisor's that the sandbox's sockets do
	// not use.
	return append(out[:2:2], append([]string{"--network=host"}, out[2:]...)...), nil
}

// command returns the low-level runtime's command line for cl: a create
// or run with the hardened bundle, an exec with the hardened process,
// every other command with the low-level runtime's root. A command that
// would make a container from a bundle hutch-runc did not harden is
// refused.
func (r *runtime) command(cl *cmdline) ([]string, error) {
	switch cl.name() {
	case "create", "run":
		return r.create(cl)
	case "exec":
		return r.exec(cl)
	case "restore":
		// runc restore makes a container from --bundle's config.json
		// as it is: no user namespace, no hutch init, no hooks, so no
		// firewall and no proxy (S2, S6); and CRIU restores no
		// Landlock domain.
		return nil, errors.New("restore is not supported: a container restored from a checkpoint would run without hutch's confinement (user namespace, Landlock, egress firewall and proxy)")
	}
	return cl.rewrite(r.runcRoot(), nil, nil, nil), nil
}

// runCreate runs the low-level runtime's create (out) as a child, with
// hutch-runc's standard streams and the descriptors --preserve-fds hands
// on, and undoes what hutch-runc prepared for the container when it
// fails: the runtime runs no poststop hook for a container it could not
// create. The container's first process outlives the runtime, as under
// runc: it goes to the engine's shim, the subreaper.
func (r *runtime) runCreate(cl *cmdline, out []string, stderr io.Writer) int {
	cmd := exec.Command(r.backend, out...)
	cmd.Args[0] = filepath.Base(r.backend)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if v, ok := cl.value("preserve-fds"); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1<<16 {
			return fail(cl, stderr, fmt.Errorf("--preserve-fds %q: not a count", v))
		}
		for i := range n {
			cmd.ExtraFiles = append(cmd.ExtraFiles, os.NewFile(uintptr(3+i), fmt.Sprintf("fd-%d", 3+i)))
		}
	}
	err := cmd.Run()
	if err == nil {
		return 0
	}
	id, _ := cl.id()
	// The runtime reported its own failure (in --log): only what
	// hutch-runc prepared is undone here.
	if cerr := cleanupState(r.stateDir(id)); cerr != nil {
		fmt.Fprintf(stderr, "hutch-runc: undo the failed create: %v\n", cerr)
	}
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() > 0 {
		return ee.ExitCode()
	}
	return fail(cl, stderr, fmt.Errorf("run %s: %w", r.backend, err))
}

// versionAsked reports whether the global flags ask for the version.
func versionAsked(cl *cmdline) bool {
	for _, f := range cl.global {
		if f.name == "version" || f.name == "v" {
			return true
		}
	}
	return false
}

// runtime is hutch-runc for one command line.
type runtime struct {
	// root is hutch-runc's --root.
	root string
	// backend is the low-level runtime's binary.
	backend string
	// policy is the node policy containers get without an annotation
	// (--hutch-policy), policyDir the directory of the node's policies.
	policy, policyDir string
	// upstreamCA is a file of certificates the proxy trusts besides
	// the system's (--hutch-upstream-ca).
	upstreamCA string
	// tier is the isolation tier: "" or TierGVisor.
	tier string
	// host is, for check --host, the node whose installation is
	// checked from a pod: backend and policyDir are under its root.
	host *Installation
}

// GVisorName is the name under which hutch-runc's binary (a link to it)
// runs its containers under gVisor, for engines that give a runtime no
// arguments (containerd's runc shim, a RuntimeClass's handler).
const GVisorName = "hutch-runsc"

// RunscEnv names the environment variable that gives runsc's path for the
// gVisor tier, which --hutch-runsc overrides; runsc on PATH without either.
const RunscEnv = "HUTCH_RUNSC"

// gvisorRuntime finds runsc for the gVisor tier.
func gvisorRuntime(cl *cmdline) (string, error) {
	p, ok := cl.globalValue(hutchFlagRunsc)
	if !ok {
		p = os.Getenv(RunscEnv)
	}
	if p == "" {
		var err error
		if p, err = exec.LookPath("runsc"); err != nil {
			return "", fmt.Errorf("the gVisor tier needs runsc: none on PATH (or give --%s, or set %s)", hutchFlagRunsc, RunscEnv)
		}
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("runsc %q: not an absolute path", p)
	}
	return p, nil
}

// PolicyDirEnv names the environment variable that gives the directory of
// the node's policies (containerd's environment, say), which
// --hutch-policy-dir overrides; DefaultPolicyDir without either.
const PolicyDirEnv = "HUTCH_RUNC_POLICY_DIR"

// runcRoot is the low-level runtime's --root.
func (r *runtime) runcRoot() string {
	if r.tier == TierGVisor {
		return filepath.Join(r.root, "runsc")
	}
	return filepath.Join(r.root, "runc")
}

// stateDir is hutch-runc's directory for container id.
func (r *runtime) stateDir(id string) string { return filepath.Join(r.root, "hutch", id) }

// lowLevelRuntime finds the runtime hutch-runc hands containers to.
func lowLevelRuntime() (string, error) {
	if p := os.Getenv(RuntimeEnv); p != "" {
		if !filepath.IsAbs(p) {
			return "", fmt.Errorf("%s=%q: not an absolute path", RuntimeEnv, p)
		}
		return p, nil
	}
	self, _ := os.Executable()
	for _, name := range []string{"runc", "crun"} {
		p, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		if abs, err := filepath.EvalSymlinks(p); err == nil && abs == self {
			continue
		}
		return p, nil
	}
	return "", fmt.Errorf("no low-level OCI runtime: neither runc nor crun is on PATH (or set %s)", RuntimeEnv)
}

// version prints hutch-runc's version and the low-level runtime's.
func (r *runtime) version(stdout, stderr io.Writer) int {
	fmt.Fprintf(stdout, "hutch-runc version %s\n", Version)
	out, err := exec.Command(r.backend, "--version").Output()
	if err != nil {
		fmt.Fprintf(stderr, "hutch-runc: %s --version: %v\n", r.backend, err)
		return 1
	}
	fmt.Fprintf(stdout, "low-level runtime: %s\n%s", r.backend, out)
	return 0
}

// create hardens the bundle of a create or run and returns the low-level
// runtime's command line, which names the hardened bundle.
func (r *runtime) create(cl *cmdline) ([]string, error) {
	id, err := cl.id()
	if err != nil {
		return nil, err
	}
	if !validID(id) {
		return nil, fmt.Errorf("invalid container ID %q", id)
	}
	if err := checkKernel(); err != nil {
		return nil, err
	}
	bundle, _ := cl.value("bundle", "b")
	if bundle == "" {
		bundle = "."
	}
	if bundle, err = filepath.Abs(bundle); err != nil {
		return nil, err
	}
	var s specs.Spec
	if err := readJSON(filepath.Join(bundle, "config.json"), &s); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(r.runcRoot(), id)); err == nil {
		return nil, fmt.Errorf("container with id %q exists", id)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find hutch-runc's own binary: %w", err)
	}
	dir := r.stateDir(id)
	mnt := mountsDir(r.root, id)
	// What containers gone without a delete left (their engine was
	// killed): a read of each one's back-reference when there is
	// nothing to do.
	sweepMounts(mountsRoot)
	// What a create that failed before the low-level runtime took the
	// container left.
	if err := cleanupState(dir); err != nil {
		return nil, err
	}
	port, err := agentPort(s.Annotations)
	if err != nil {
		return nil, err
	}
	o := Options{Binary: self, StateDir: dir, Tier: r.tier}
	if s.Annotations[containerTypeAnnotation] != "sandbox" {
		// A pod's sandbox (its pause process) gets the pod's
		// annotations too: it stays as it is, and its firewall, which
		// the pod's containers share, lets the agent's port in.
		o.AgentPort = port
	}
	c, err := Harden(&s, bundle, o)
	if err != nil {
		return nil, err
	}
	plan, err := planEgress(s.Annotations, r.policy, r.policyDir)
	if err != nil {
		return nil, err
	}
	plan.AgentPort = port
	plan.Files = mnt
	plan.Tier = r.tier
	if r.upstreamCA != "" {
		plan.UpstreamCAs = []string{r.upstreamCA}
	}
	err = prepareState(&s, dir, plan, r.backend)
	if err == nil {
		err = writeJSON(filepath.Join(dir, "bundle", "config.json"), s)
	}
	if err == nil {
		err = writeJSON(filepath.Join(dir, "confinement.json"), c)
	}
	if err != nil {
		cleanupState(dir)
		return nil, err
	}
	set := map[string]string{"bundle": filepath.Join(dir, "bundle")}
	if err := absFlags(cl, set, "pid-file", "console-socket"); err != nil {
		return nil, err
	}
	return cl.rewrite(r.runcRoot(), set, nil, nil), nil
}

// absFlags puts in set the absolute paths of the flags names that cl
// gives: the low-level runtime reads them in the hardened bundle's
// directory, not in the caller's.
func absFlags(cl *cmdline, set map[string]string, names ...string) error {
	for _, n := range names {
		if v, ok := cl.value(n); ok && v != "" {
			abs, err := filepath.Abs(v)
			if err != nil {
				return err
			}
			set[n] = abs
		}
	}
	return nil
}

// exec hardens the process of an exec: the one --process names, or the
// command after the container's ID.
func (r *runtime) exec(cl *cmdline) ([]string, error) {
	id, err := cl.id()
	if err != nil {
		return nil, err
	}
	if !validID(id) {
		return nil, fmt.Errorf("invalid container ID %q", id)
	}
	var c Confinement
	if err := readJSON(filepath.Join(r.stateDir(id), "confinement.json"), &c); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("container %q does not exist", id)
		}
		return nil, err
	}
	// The container's egress: what hutch set in its environment, and
	// whether it holds its network (a container without a plan does).
	var plan egressPlan
	held := true
	if err := readJSON(filepath.Join(r.stateDir(id), egressFile), &plan); err == nil {
		held = plan.Mode != "host"
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if held {
		// runc exec --cap CAP_NET_RAW would give it back.
		cl.flags = slices.DeleteFunc(cl.flags, func(f flag) bool {
			return (f.name == "cap" || f.name == "c") && isEgressCap(f.value)
		})
	}
	set := map[string]string{}
	if err := absFlags(cl, set, "pid-file", "console-socket"); err != nil {
		return nil, err
	}
	pf, ok := cl.value("process", "p")
	if !ok {
		tail := cl.args[cl.rest+1:]
		if len(tail) == 0 {
			return nil, errors.New("exec: no command, and no --process")
		}
		if c.Tier != TierGVisor {
			tail = append(c.InitArgs(), tail...)
		}
		// The process gets the container's environment from the
		// low-level runtime; hutch's part of it goes with --env.
		var extra []string
		if c.Tier != TierGVisor {
			// runsc's exec has no such flag (its processes are
			// the Sentry's, whose kernel is the boundary).
			extra = append(extra, "--no-new-privs")
		}
		for _, kv := range plan.Env {
			extra = append(extra, "--env", kv)
		}
		if plan.AgentPort != 0 {
			// The low-level runtime gives the process the container's
			// environment, the agent's secrets with it: the later
			// --env, empty, replaces them.
			for _, k := range agent.SecretEnv {
				extra = append(extra, "--env", k+"=")
			}
		}
		return cl.rewrite(r.runcRoot(), set, extra, tail), nil
	}
	var p specs.Process
	if err := readJSON(pf, &p); err != nil {
		return nil, err
	}
	if err := HardenProcess(&p, c); err != nil {
		return nil, err
	}
	p.Env = execEnv(p.Env, plan)
	if plan.AgentPort != 0 {
		// The agent's secrets, in the container's spec for the agent
		// alone: a process of the container's code would read them
		// in the environment of another it can trace.
		p.Env = slices.DeleteFunc(p.Env, func(kv string) bool {
			k, _, _ := strings.Cut(kv, "=")
			return slices.Contains(agent.SecretEnv, k)
		})
	}
	if held {
		dropEgressCaps(p.Capabilities)
	}
	// The hardened process goes to the low-level runtime in a memory
	// file it inherits: nothing to remove after it, and probes that exec
	// every few seconds leave nothing behind.
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate("hutch-runc-process", 0)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	// Written through the descriptor itself: an *os.File of it would
	// close it when collected, before the runtime reads it (or, in a
	// process that goes on, close whatever file has its number then).
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("write the process to a memory file: %w", err)
		}
		b = b[n:]
	}
	set["process"] = fmt.Sprintf("/proc/self/fd/%d", fd)
	return cl.rewrite(r.runcRoot(), set, nil, nil), nil
}

// checkKernel fails when the kernel lacks what hutch's init needs (S2):
// the init would fail in every container.
func checkKernel() error {
	if landlock.ABI() < 1 {
		return errors.New("the kernel has no Landlock (or it is not enabled): hutch-runc confines containers with it")
	}
	if err := seccomp.Supported(); err != nil {
		return err
	}
	return nil
}

// readJSON decodes the file at path into v, bounded by maxConfig.
func readJSON(path string, v any) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfig+1))
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxConfig {
		return fmt.Errorf("%s: larger than %d bytes", path, maxConfig)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// writeJSON writes v to a new file at path, readable by its owner only.
func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// fail reports err as runc does: on stderr, and in the --log file, as a
// JSON line when --log-format is json (containerd's shim reads the last
// error there and shows it as the reason a create failed).
func fail(cl *cmdline, stderr io.Writer, err error) int {
	msg := "hutch-runc: " + err.Error()
	fmt.Fprintln(stderr, msg)
	if cl == nil {
		return 1
	}
	path, ok := cl.globalValue("log")
	if !ok || path == "" {
		return 1
	}
	f, ferr := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if ferr != nil {
		return 1
	}
	defer f.Close()
	if format, _ := cl.globalValue("log-format"); format == "json" {
		b, _ := json.Marshal(map[string]string{"level": "error", "msg": msg, "time": time.Now().UTC().Format(time.RFC3339Nano)})
		f.Write(append(b, '\n'))
	} else {
		fmt.Fprintf(f, "time=%q level=error msg=%q\n", time.Now().UTC().Format(time.RFC3339Nano), msg)
	}
	return 1
}
