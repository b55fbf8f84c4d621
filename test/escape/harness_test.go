//go:build linux

package escape

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/microvm"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/runner"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// mode is who starts hutch, and under which isolation tier.
type mode struct {
	name  string
	uid   int    // uid and gid of the hutch process
	tier  string // policy.TierNamespace, policy.TierGVisor or policy.TierMicroVM
	runsc string // tier gvisor: the runsc binary (testutil.Runsc)
	// directFS runs tier gvisor with runsc's direct file access
	// (--gvisor-directfs), under which the properties must hold too.
	directFS bool
	kernel   string // tier microvm: the guest kernel's directory (guestKernel)
}

// modes are who starts hutch under the namespace tier.
var modes = []mode{
	{name: "root", uid: 0, tier: policy.TierNamespace},
	{name: "user", uid: testutil.UnprivilegedUID, tier: policy.TierNamespace},
}

// tiers is the table of isolation tiers the suite runs every test under,
// each as a subtest named after the tier, with who may start hutch there:
// the gVisor tier runs as root only in this version, with gVisor's file
// access through its gofer (the default) and direct ("root-directfs").
var tiers = []struct {
	name  string
	modes []mode
}{
	{policy.TierNamespace, modes},
	{policy.TierGVisor, []mode{
		{name: "root", uid: 0, tier: policy.TierGVisor},
		{name: "root-directfs", uid: 0, tier: policy.TierGVisor, directFS: true},
	}},
}

// microVM is who starts hutch under the microvm tier (hutch run --tier
// microvm --allow-emulation, with the guest kernel of
// $HUTCH_TEST_GUEST_KERNEL): root only, as the tier needs in this
// version. Its guest is the workspace owner's (root's here), with a
// kernel of its own.
var microVM = mode{name: "root", uid: 0, tier: policy.TierMicroVM}

// underMicroVM is the table of the tests that run under the microvm tier
// too, as the subtest "microvm/root" of forEachMode: the escape items of
// the filesystem (ESCAPES 1, 3–7, 21–24), environment (2), network (13,
// 15–18) and secrets (19) classes as they apply to hutch run. Every other
// test skips it: those of these classes in notUnderMicroVM, with the
// table's reason, and those of the other classes (processes, privilege,
// resources, sockets by path, terminals, policy, hutch serve and mcp) as
// not the tier's escape items in this version. Each guest boots under
// QEMU's software emulation on a machine without KVM, several
// CPU-seconds a boot, so an item runs here in as few sandboxes as its
// attacks allow.
var underMicroVM = []string{
	// Files.
	"TestItem01_CredentialFiles",
	"TestItem03_HostRootOnlyFiles",
	"TestItem04_ShellRCWorkspace",
	"TestItem05_Git",
	"TestItem05_SubmoduleGitDir",
	"TestItem06_ToolConfigWorkspace",
	"TestItem07_RenameParent",
	"TestItem07_WorkspaceThroughLink",
	"TestItem21_SetIDFiles",
	"TestItem21_FileCaps",
	"TestItem21_GitWritable",
	"TestItem21_Copies",
	"TestItem22_GitEverywhere",
	"TestItem23_ToolConfig",
	"TestItem24_CredentialStores",
	// Environment.
	"TestItem02_Environment",
	"TestItem02_SecretNeverInSandbox",
	// Network.
	"TestItem13_AbstractSockets",
	"TestItem15_DirectEgress",
	"TestItem15_PolicyNoDirectRoute",
	"TestItem15_ProxyBypass",
	"TestItem16_DNS",
	"TestItem16_DNSProxy",
	"TestItem17_FilterCoverage",
	"TestItem18_SSRF",
	"TestItem18_SSRFProxy",
	"TestItem18_SSRFAskedHosts",
	// Secrets.
	"TestItem19_Placeholders",
}

// notUnderMicroVM is the table of the tests of underMicroVM's classes
// that do not run under the microvm tier, each with the reason.
var notUnderMicroVM = map[string]string{
	"TestItem02_SecretCopiesRefused":  "hutch refuses a secret's copies on the host before any sandbox starts, the same for every tier; only its control would boot a guest",
	"TestItem04_ShellRCHome":          "needs the home directory writable (--allow-write ~), refused under microvm (policy.TierRefusals: filesystem.allow_write); the guest sees no home of the host's",
	"TestItem06_AutostartHome":        "needs the home directory writable (--allow-write ~), refused under microvm (policy.TierRefusals: filesystem.allow_write); the guest sees no home of the host's",
	"TestItem07_Symlinks":             "attacks the home through links the sandbox makes; the guest sees no home of the host's and resolves links in its own view, where only the workspace is the host's writable files (TestItem01_CredentialFiles and TestItem24_CredentialStores run with the home as the workspace)",
	"TestItem07_BindMountAliases":     "attacks the home's other names on the host; the guest sees no home of the host's, and the root's view binds the system directories without what is mounted in them",
	"TestItem07_LinkFollowedNextRun":  "its control reads the home through a link; the guest sees no home of the host's (hutch's host-side steps that follow no link are the other tiers' sandbox.Protect, which the microvm tier shares)",
	"TestItem07_ReviewModeWrites":     "review mode is refused under microvm (policy.TierRefusals: filesystem.workspace_mode)",
	"TestItem07_Volumes":              "volumes are hutch serve's, refused for the tier there",
	"TestItem07_VolumeContentPaths":   "volumes are hutch serve's, refused for the tier there",
	"TestItem21_ServedLayer":          "hutch serve's: the suite's served tests run daemons of the namespace and gVisor tiers (forEachServedTier); a served guest's root and workspace are in its memory, nothing of the host's is shared writable (cmd/hutch's TestServeMicroVM*)",
	"TestItem21_CpFromServed":         "hutch serve's: the suite's served tests run daemons of the namespace and gVisor tiers (forEachServedTier); hutch cp applies hostperm's rule on the host whatever the tier",
	"TestItem21_ReviewWorkspaceApply": "review workspaces are refused for the tier under hutch serve",
	"TestItem24_DiffShowsOnlyTheView": "hutch serve's diffs; snapshots and diffs are refused for the tier there",
	"TestItem21_Umask":                "the namespace tier's supervisor keeps the umask's withheld bits in the sandbox; under microvm the guest's umask is its own, and the workspace's virtiofsd applies the sandbox's umask on the host (TestItem21_SetIDFiles and _Copies check the host's modes)",
	"TestItem13_SocketFamilies":       "the families are the guest's own kernel's, whose root (the workspace's owner, root here) holds every capability of it, with no network or vsock device: what they could reach of the host's is egress, TestItem15_*'s",
	"TestItem15_NetHost":              "needs --net host, refused under microvm (policy.TierRefusals: network.mode): the guest has no network device",
	"TestItem19_E2BSecretRules":       "E2B's API is hutch serve's, whose sandboxes of the tier are not the escape suite's",
}

// notUnderGVisor is the table of the tests that do not run under the
// gVisor tier, by design, each with the reason: what the test needs that
// the tier refuses (policy.TierRefusals) or does not have yet. Every other
// test of forEachMode runs under both tiers.
var notUnderGVisor = map[string]string{
	"TestItem10_StandIns":         "the stand-ins are the namespace tier's (hutch serves them over hidden and protected paths and counts what they refuse); the gVisor tier masks with an empty read-only file or tmpfs instead (TestItem01_CredentialFiles, TestItem07_Symlinks run there) and reports no refused read",
	"TestItem21_Umask":            "the namespace tier's supervisor keeps the umask's withheld bits; under gVisor it has no counterpart (ARCHITECTURE, The gVisor tier, Host writes: a command that lowers its umask can create files writable by others, never set-id, which TestItem21_SetIDFiles checks there) and gVisor's /proc/self/status has no Umask line",
	"TestItem15_NetHost":          "needs --net host, refused under gVisor (policy.TierRefusals: network.mode)",
	"TestItem07_ReviewModeWrites": "review mode is the namespace tier's in this version, refused under gVisor (policy.TierRefusals: filesystem.workspace_mode; cmd/hutch's TestReviewRefused)",
}

// notUnderDirectFS is the table of the tests that run under the gVisor
// tier with its gofer ("root") but not again with direct file access
// ("root-directfs"), each with the reason. Direct file access changes how
// gVisor's kernel reaches the sandbox's files and what its processes hold
// on the host (file capabilities in the sandbox's user namespace, host
// file descriptors): every test of files, credentials, host sockets by
// path, identities, leaked descriptors and secrets runs in both modes.
// These test what the Sentry answers itself (system calls, /proc,
// namespaces, mounts in its own tree, terminals, PID 1), what goes through
// gVisor's network stack to hutch's proxy, the output pipe, the limits of
// the sandbox's cgroup, or what hutch decides on the host before the
// sandbox starts — none of which either mode's file access takes part in.
var notUnderDirectFS = map[string]string{
	"TestItem11_Output":              "output reaches hutch through the Sentry's stdout pipe, whatever its file access",
	"TestItem11_ForkBomb":            "the process limit is the sandbox cgroup's and gVisor's own, not its file access's",
	"TestItem09_Timeout":             "the deadline kills the sandbox from the host, whatever its file access",
	"TestItem15_ProxyBypass":         "egress goes through gVisor's network stack to hutch's proxy, not through its file access",
	"TestItem16_DNSProxy":            "name resolution goes through gVisor's network stack to hutch's proxy, not through its file access",
	"TestItem18_SSRF":                "egress goes through gVisor's network stack to hutch's proxy, not through its file access",
	"TestItem18_SSRFProxy":           "egress goes through gVisor's network stack to hutch's proxy, not through its file access",
	"TestItem18_SSRFAskedHosts":      "egress goes through gVisor's network stack to hutch's proxy, not through its file access",
	"TestItem19_Placeholders":        "placeholders are swapped by hutch's proxy on the way out, through gVisor's network stack, not its file access",
	"TestItem15_DirectEgress":        "egress goes through gVisor's network stack, not its file access",
	"TestItem15_PolicyNoDirectRoute": "egress goes through gVisor's network stack, not its file access",
	"TestItem16_DNS":                 "name resolution goes through gVisor's network stack, not its file access",
	"TestItem13_AbstractSockets":     "abstract sockets are gVisor's network stack's, with no path in any file system",
	"TestItem13_SocketFamilies":      "socket families are the Sentry's system calls, not its file access",
	"TestItem08_ProcAndProcesses":    "processes and /proc are the Sentry's own, whatever its file access",
	"TestItem09_Daemons":             "the sandbox's processes end with its Sentry, whatever its file access",
	"TestItem09_SupervisorKilled":    "the sandbox's processes end with its Sentry, whatever its file access",
	"TestItem10_KernelSurface":       "system calls are answered by the Sentry, whatever its file access",
	"TestItem10_Namespaces":          "namespaces are the Sentry's, whatever its file access",
	"TestItem10_Mount":               "mounts are made in the Sentry's own file system tree, which the host never sees",
	"TestItem11_MemoryBomb":          "the memory limit is the sandbox cgroup's, not its file access's",
	"TestItem14_TerminalInjection":   "the terminal is the Sentry's, relayed by hutch, whatever its file access",
	"TestItem17_FilterCoverage":      "system calls are answered by the Sentry, whatever its file access",
	"TestItem27_RunPID1":             "PID 1 is the Sentry's process, whatever its file access",
	"TestItem20_FailClosed":          "hutch refuses on the host, before the sandbox starts",
	"TestItem20_NoImplicitConfig":    "hutch reads its configuration on the host, before the sandbox starts",
	"TestItem20_PolicyFile":          "hutch reads the policy file on the host, before the sandbox starts",
}

// servedNotUnderGVisor is the table of the tests of hutch serve
// (forEachServedTier) that do not run against a daemon of the gVisor
// tier, each with the reason.
var servedNotUnderGVisor = map[string]string{
	"TestItem21_ReviewWorkspaceApply": "review workspaces are the namespace tier's in this version: a daemon of the gVisor tier refuses them (501, daemon.bindReview)",
}

// forEachServedTier runs f once for every tier of tiers, as parallel
// subtests named after it, with the flags that make it the default tier
// of the hutch serve f starts (startServed): every sandbox f makes
// without naming a tier is of that tier. A test of servedNotUnderGVisor
// skips its "gvisor" subtest with the table's reason.
func forEachServedTier(t *testing.T, f func(t *testing.T, tierFlags []string)) {
	t.Helper()
	testutil.RequireRoot(t)
	t.Parallel()
	for _, tr := range tiers {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			var flags []string
			if tr.name == policy.TierGVisor {
				if why, ok := servedNotUnderGVisor[t.Name()[:strings.Index(t.Name(), "/")]]; ok {
					t.Skip("not against a daemon of the gVisor tier (servedNotUnderGVisor): " + why)
				}
				flags = []string{"--default-tier", policy.TierGVisor, "--runsc", testutil.Runsc(t)}
			}
			f(t, flags)
		})
	}
}

// underGVisor reports whether tierFlags (forEachServedTier's) make the
// daemon's default tier gVisor.
func underGVisor(tierFlags []string) bool {
	return slices.Contains(tierFlags, policy.TierGVisor)
}

// markerVar is set in the sandbox's environment by tests that look for
// leftover sandbox processes on the host: every process of the sandbox
// inherits it, and root can read every process's environment.
const markerVar = "HUTCH_ESCAPE_MARK"

// harness is one test's sandbox environment: who runs hutch, under which
// tier, its workspace and a fake home directory for it.
type harness struct {
	t    *testing.T
	mode mode
	ws   string // workspace, owned by mode.uid
	home string // fake $HOME outside /tmp (which the sandbox replaces), owned by mode.uid
}

// forEachMode runs f under every tier of tiers, as the parallel subtests
// "namespace" and "gvisor", and in each as the parallel subtests of who
// starts hutch ("root", "user"), each with a fresh sandbox environment. A
// test of notUnderGVisor skips its "gvisor" subtest with the table's
// reason. A test of underMicroVM runs under the microvm tier too, as the
// subtest "microvm/root"; every other test skips "microvm", with
// notUnderMicroVM's reason when it is there.
func forEachMode(t *testing.T, f func(t *testing.T, sb *harness)) {
	t.Helper()
	forModes(t, (*testing.T).Parallel, f)
}

// forEachModeSerially is forEachMode for a test that holds the host
// root's lock alone (testutil.HostRootChanges): the test and its subtests
// run one after another, not in parallel with the suite's others. A
// parallel test would hold the lock from before it paused, for as long
// as the suite's parallel tests take to let its subtests run, and every
// test of another package that restores a sandbox of the host's root
// (testutil.HostRootSteady) would wait that long.
func forEachModeSerially(t *testing.T, f func(t *testing.T, sb *harness)) {
	t.Helper()
	forModes(t, func(*testing.T) {}, f)
}

// forModes is forEachMode with parallel called where a test may run in
// parallel with others.
func forModes(t *testing.T, parallel func(*testing.T), f func(t *testing.T, sb *harness)) {
	t.Helper()
	testutil.RequireRoot(t)
	parallel(t)
	t.Run(policy.TierMicroVM, func(t *testing.T) {
		name := t.Name()[:strings.Index(t.Name(), "/")]
		if why, ok := notUnderMicroVM[name]; ok {
			t.Skip("not under the microvm tier (notUnderMicroVM): " + why)
		}
		if !slices.Contains(underMicroVM, name) {
			t.Skip("not under the microvm tier: its escape items are those of underMicroVM (files, environment, network, secrets)")
		}
		parallel(t)
		m := microVM
		m.kernel = guestKernel(t)
		t.Run(m.name, func(t *testing.T) {
			parallel(t)
			f(t, newSandbox(t, m))
		})
	})
	for _, tr := range tiers {
		t.Run(tr.name, func(t *testing.T) {
			parallel(t)
			runsc := ""
			if tr.name == policy.TierGVisor {
				if why, ok := notUnderGVisor[t.Name()[:strings.Index(t.Name(), "/")]]; ok {
					t.Skip("not under the gVisor tier, by design (notUnderGVisor): " + why)
				}
				runsc = testutil.Runsc(t)
			}
			for _, m := range tr.modes {
				m.runsc = runsc
				t.Run(m.name, func(t *testing.T) {
					if m.directFS {
						if why, ok := notUnderDirectFS[t.Name()[:strings.Index(t.Name(), "/")]]; ok {
							t.Skip("with the gofer only, not again with direct file access (notUnderDirectFS): " + why)
						}
					}
					parallel(t)
					f(t, newSandbox(t, m))
				})
			}
		})
	}
}

// gvisor reports whether the sandbox runs under the gVisor tier.
func (sb *harness) gvisor() bool { return sb.mode.tier == policy.TierGVisor }

// microvm reports whether the sandbox runs under the microvm tier.
func (sb *harness) microvm() bool { return sb.mode.tier == policy.TierMicroVM }

// guestKernel returns the guest kernel's directory for the microvm tier
// ($HUTCH_TEST_GUEST_KERNEL, else the cache's current one), or skips
// (fails under HUTCH_TEST_ROOT=1) when the host cannot boot a guest: no
// QEMU or virtiofsd, no kernel fetched by scripts/guest-kernel.sh.
func guestKernel(t *testing.T) string {
	t.Helper()
	_, err := exec.LookPath("qemu-system-x86_64")
	testutil.Need(t, err == nil, "no qemu-system-x86_64 (scripts/guest-kernel.sh installs it)")
	_, err = os.Stat(microvm.DefaultVirtiofsd)
	testutil.Need(t, err == nil, "no virtiofsd (Debian's qemu-system-common)")
	if dir := os.Getenv("HUTCH_TEST_GUEST_KERNEL"); dir != "" {
		return dir
	}
	k, err := microvm.FindKernel("")
	testutil.Need(t, err == nil, "no guest kernel (run scripts/guest-kernel.sh)")
	return k.Dir
}

// gvisorAlso returns want with, under the gVisor tier only, the results of
// also accepted too: what gVisor's kernel answers to the same attack. Each
// caller says why none of them is an escape. Under the namespace tier want
// is returned unchanged.
func (sb *harness) gvisorAlso(want, also map[string][]string) map[string][]string {
	return alsoIf(sb.gvisor(), want, also)
}

// microvmAlso is gvisorAlso for the microvm tier: want with, under the
// microvm tier only, the results of also accepted too, what the guest's
// own kernel answers to the same attack. Each caller says why none of
// them is an escape.
func (sb *harness) microvmAlso(want, also map[string][]string) map[string][]string {
	return alsoIf(sb.microvm(), want, also)
}

// alsoIf returns want with, when on, the results of also added.
func alsoIf(on bool, want, also map[string][]string) map[string][]string {
	if !on {
		return want
	}
	out := maps.Clone(want)
	for k, v := range also {
		out[k] = append(slices.Clone(out[k]), v...)
	}
	return out
}

func newSandbox(t *testing.T, m mode) *harness {
	t.Helper()
	return &harness{t: t, mode: m, ws: testutil.OwnedDir(t, m.uid), home: hostDir(t, m.uid, "home")}
}

// hostDir makes a directory outside /tmp (the sandbox has a private /tmp),
// mode 0755 and owned by uid, removed when the test ends.
func hostDir(t *testing.T, uid int, what string) string {
	t.Helper()
	base := "/var/tmp"
	if fi, err := os.Stat(base); err != nil || !fi.IsDir() {
		t.Fatalf("need %s for directories the sandbox can see: %v", base, err)
	}
	dir, err := os.MkdirTemp(base, "hutch-escape-"+what+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// With what a daemon left mounted there (its volumes).
		if err := testutil.RemoveMounted(dir); err != nil {
			t.Errorf("the test's directory: %v", err)
		}
	})
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, uid); err != nil {
		t.Fatal(err)
	}
	return dir
}

// opts are the knobs of one hutch run.
type opts struct {
	flags      []string   // flags of "hutch run"
	env        []string   // added to hutch's environment
	dir        string     // working directory (default: the workspace)
	stdin      *os.File   // default: /dev/null
	stdout     *os.File   // default: captured into result.stdout
	stderr     *os.File   // default: captured into result.stderr
	extraFiles []*os.File // inherited by hutch as fds 3, 4, ...
	// ctty, when set, is hutch's controlling terminal (a pty's end,
	// inherited after extraFiles) in a session of its own, where hutch
	// run asks what the approval rules say ask; stdin stays o.stdin.
	ctty     *os.File
	deadline time.Duration // hutch is killed and the test fails after this long (default 5 minutes, 15 under microvm)
	noCheck  bool          // do not fail the test when hutch could not start the sandbox
	umask    string        // hutch's umask (octal), when not the test's own
	// fuse, when set, is a device node bound over /dev/fuse in a mount
	// namespace of hutch's own, so that a test decides whether the
	// user may open it.
	fuse string
	// binds, when set, are bind mounts (source, target) made for hutch
	// alone, in a mount namespace of its own like fuse's: the host's
	// other tests never see them.
	binds [][2]string
}

// result is how one hutch run ended.
type result struct {
	stdout, stderr string
	code           int
	elapsed        time.Duration
	maxRSSKiB      int64 // peak RSS of hutch or any process it waited for
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s\n--- stderr:\n%s", r.code, clip(r.stdout), clip(r.stderr))
}

func clip(s string) string {
	if len(s) > 4000 {
		return s[:4000] + "…(clipped)"
	}
	return s
}

// run runs `hutch run [o.flags] -- /bin/sh -c script` in the sandbox's
// workspace and returns its output and exit code.
func (sb *harness) run(o opts, script string) result {
	sb.t.Helper()
	args := append([]string{"run"}, o.flags...)
	args = append(args, "--", "/bin/sh", "-c", script)
	return sb.hutch(o, args...)
}

// env is hutch's environment: nothing of the test's own, a fake HOME.
func (sb *harness) env(extra []string) []string {
	user := "root"
	if sb.mode.uid != 0 {
		user = "hutchtest"
	}
	env := []string{
		"HOME=" + sb.home,
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"USER=" + user, "LOGNAME=" + user, "LANG=C",
	}
	return append(env, extra...)
}

// command prepares hutch with args as the sandbox's mode says: under the
// gVisor tier, "hutch run" and "hutch mcp" get --tier gvisor and the
// test's runsc (and --gvisor-directfs in a mode of direct file access);
// under the microvm tier, "hutch run" gets --tier microvm and
// --allow-emulation, and hutch the guest kernel's directory.
func (sb *harness) command(o opts, args ...string) *exec.Cmd {
	if sb.microvm() && len(args) > 0 && args[0] == "run" {
		args = append([]string{args[0], "--tier", policy.TierMicroVM, "--allow-emulation"}, args[1:]...)
		o.env = append(slices.Clip(o.env), runner.GuestKernelEnv+"="+sb.mode.kernel)
	}
	if sb.gvisor() && len(args) > 0 && (args[0] == "run" || args[0] == "mcp") {
		flags := []string{args[0], "--tier", policy.TierGVisor, "--runsc", sb.mode.runsc}
		if sb.mode.directFS {
			flags = append(flags, "--gvisor-directfs")
		}
		args = append(flags, args[1:]...)
	}
	cmd := exec.Command(testutil.Hutch(sb.t), args...)
	if o.umask != "" {
		cmd = exec.Command("/bin/sh", append([]string{"-c", "umask " + o.umask + ` && exec "$0" "$@"`, testutil.Hutch(sb.t)}, args...)...)
	}
	binds := o.binds
	if o.fuse != "" {
		binds = append([][2]string{{o.fuse, "/dev/fuse"}}, binds...)
	}
	if len(binds) > 0 {
		// mount(8) as root in a mount namespace of its own (which Go makes
		// private), then hutch as the mode's user.
		drop := []string{}
		if sb.mode.uid != 0 {
			drop = []string{"setpriv", fmt.Sprintf("--reuid=%d", sb.mode.uid), fmt.Sprintf("--regid=%d", sb.mode.uid), "--clear-groups"}
		}
		inner := append(append(drop, cmd.Path), cmd.Args[1:]...)
		script := ""
		var mountArgs []string
		for i, b := range binds {
			script += fmt.Sprintf(`mount --bind "${%d}" "${%d}" && `, 2*i+1, 2*i+2)
			mountArgs = append(mountArgs, b[0], b[1])
		}
		script += fmt.Sprintf(`shift %d && exec "$@"`, 2*len(binds))
		cmd = exec.Command("/bin/sh", append(append([]string{"-c", script, "sh"}, mountArgs...), inner...)...)
		cmd.Env = sb.env(o.env)
		cmd.Dir = o.dir
		if cmd.Dir == "" {
			cmd.Dir = sb.ws
		}
		cmd.ExtraFiles = o.extraFiles
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
		return cmd
	}
	cmd.Env = sb.env(o.env)
	cmd.Dir = o.dir
	if cmd.Dir == "" {
		cmd.Dir = sb.ws
	}
	cmd.ExtraFiles = o.extraFiles
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if sb.mode.uid != 0 {
		id := uint32(sb.mode.uid)
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: id, Gid: id, Groups: []uint32{}}
	}
	return cmd
}

// hutch runs the hutch binary with args and waits for it.
func (sb *harness) hutch(o opts, args ...string) result {
	sb.t.Helper()
	return sb.start(o, args...).wait()
}

// running is a hutch process started by start.
type running struct {
	sb         *harness
	o          opts
	args       []string
	cmd        *exec.Cmd
	outF, errF *os.File
	begin      time.Time
}

// start starts the hutch binary with args. Output goes to files, not
// pipes, so a process left behind in the sandbox cannot keep the test
// waiting.
func (sb *harness) start(o opts, args ...string) *running {
	t := sb.t
	t.Helper()
	p := &running{sb: sb, o: o, args: args, cmd: sb.command(o, args...)}
	if o.stdin != nil {
		p.cmd.Stdin = o.stdin
	}
	p.outF, p.errF = o.stdout, o.stderr
	if p.outF == nil {
		p.outF = tempFile(t, "stdout")
	}
	if p.errF == nil {
		p.errF = tempFile(t, "stderr")
	}
	p.cmd.Stdout, p.cmd.Stderr = p.outF, p.errF
	if o.ctty != nil {
		p.cmd.ExtraFiles = append(p.cmd.ExtraFiles, o.ctty)
		p.cmd.SysProcAttr.Setsid, p.cmd.SysProcAttr.Setctty = true, true
		p.cmd.SysProcAttr.Ctty = 2 + len(p.cmd.ExtraFiles)
	}
	p.begin = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start hutch: %v", err)
	}
	return p
}

// wait waits for hutch to exit, killing it after the deadline.
func (p *running) wait() result {
	t := p.sb.t
	t.Helper()
	deadline := p.o.deadline
	if deadline == 0 {
		// Only against a hang: a sandbox under gVisor on a busy
		// machine can take minutes for what takes seconds alone, and
		// a guest under software emulation more (TestItem19_Placeholders'
		// thirty-odd proxied requests: 49 s alone, over 5 minutes in the
		// whole suite).
		deadline = 5 * time.Minute
		if p.sb.microvm() {
			deadline = 15 * time.Minute
		}
	}
	var killed atomic.Bool
	timer := time.AfterFunc(deadline, func() { killed.Store(true); _ = p.cmd.Process.Kill() })
	err := p.cmd.Wait()
	timer.Stop()
	r := result{elapsed: time.Since(p.begin), code: -1}
	if p.cmd.ProcessState == nil {
		t.Fatalf("wait for hutch: %v", err)
	}
	r.code = exitCode(p.cmd.ProcessState)
	if ru, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.maxRSSKiB = ru.Maxrss
	}
	if p.o.stdout == nil {
		r.stdout = readBack(t, p.outF)
	}
	if p.o.stderr == nil {
		r.stderr = readBack(t, p.errF)
	}
	if killed.Load() {
		t.Fatalf("hutch %q did not return within %s; killed it\n%s", p.args, deadline, r)
	}
	if !p.o.noCheck && r.code == 125 {
		t.Fatalf("hutch could not start the sandbox (exit 125), so the attack was never tried:\n%s", r)
	}
	return r
}

func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func tempFile(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func readBack(t *testing.T, f *os.File) string {
	t.Helper()
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestMain removes the hutch and attacker builds once every test is done;
// the testing package exits with m.Run's result.
func TestMain(m *testing.M) {
	m.Run()
	if attackerPath != "" {
		os.RemoveAll(filepath.Dir(attackerPath))
	}
	testutil.RemoveBuilds()
}

var (
	attackerOnce sync.Once
	attackerPath string
	attackerErr  error
)

// attacker copies the attacker program into the workspace, owned by the
// sandbox's user, and returns its path relative to the workspace.
func (sb *harness) attacker() string {
	t := sb.t
	t.Helper()
	attackerOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hutch-attacker-")
		if err != nil {
			attackerErr = err
			return
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			attackerErr = err
			return
		}
		attackerPath = filepath.Join(dir, "attacker")
		cmd := exec.Command("go", "build", "-o", attackerPath, "./attacker")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			attackerErr = fmt.Errorf("go build ./attacker: %v\n%s", err, out)
		}
	})
	if attackerErr != nil {
		t.Fatalf("build attacker: %v", attackerErr)
	}
	copyFile(t, attackerPath, filepath.Join(sb.ws, "attacker"), 0o755, sb.mode.uid)
	return "./attacker"
}

func copyFile(t *testing.T, src, dst string, perm os.FileMode, uid int) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dst, string(b), perm, uid)
}

// writeFile creates (or replaces) path with content, mode perm, owned by uid.
func writeFile(t *testing.T, path, content string, perm os.FileMode, uid int) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, uid, uid); err != nil {
		t.Fatal(err)
	}
}

// mkdirs creates dirs below base (mode 0755, owned by uid).
func mkdirs(t *testing.T, base string, uid int, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		cur := base
		for _, part := range strings.Split(d, "/") {
			cur = filepath.Join(cur, part)
			if err := os.Mkdir(cur, 0o755); err != nil && !os.IsExist(err) {
				t.Fatal(err)
			}
			if err := os.Chown(cur, uid, uid); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// shellWords quotes each of args for sh, separated by spaces.
func shellWords(args ...string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// attacks parses the attacker's output: the attack as given → its result.
func attacks(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			m[k] = v
		}
	}
	return m
}

// expect checks that each attack of want ended with the given result, which
// is compared with the first word of what the attacker printed.
func expect(t *testing.T, r result, want map[string][]string) {
	t.Helper()
	got := attacks(r.stdout)
	for _, a := range sortedKeys(want) {
		res, ok := got[a]
		if !ok {
			t.Errorf("attack %s: no result printed\n%s", a, r)
			continue
		}
		first, _, _ := strings.Cut(res, " ")
		if !slices.Contains(want[a], first) {
			t.Errorf("attack %s: got %q, want one of %q", a, res, want[a])
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// argv joins attacks into the attacker's command line.
func argv(attacker string, attacks ...string) string {
	return attacker + " " + strings.Join(attacks, " ")
}

// randomName returns a fresh name with prefix.
func randomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// snapshot records every entry under dir (without following symbolic
// links): type, permissions, owner, and content hash or link target.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		desc := fmt.Sprintf("%s uid=%d gid=%d", fi.Mode(), st.Uid, st.Gid)
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			desc += " -> " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			desc += fmt.Sprintf(" size=%d sha=%x", len(b), sum[:8])
		}
		m[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot %s: %v", dir, err)
	}
	return m
}

// sameTree fails the test unless dir is exactly as before, apart from the
// entries (relative paths) in ignore.
func sameTree(t *testing.T, dir string, before map[string]string, ignore ...string) {
	t.Helper()
	after := snapshot(t, dir)
	for _, k := range sortedKeys(after) {
		if slices.Contains(ignore, k) {
			continue
		}
		if b, ok := before[k]; !ok {
			t.Errorf("host changed: %s appeared in %s (%s)", k, dir, after[k])
		} else if b != after[k] {
			t.Errorf("host changed: %s in %s was %s, is %s", k, dir, b, after[k])
		}
	}
	for _, k := range sortedKeys(before) {
		if _, ok := after[k]; !ok && !slices.Contains(ignore, k) {
			t.Errorf("host changed: %s vanished from %s", k, dir)
		}
	}
}

// markedProcs lists the host pids whose environment carries marker.
func markedProcs(marker string) []int {
	want := []byte(markerVar + "=" + marker + "\x00")
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err == nil && bytes.Contains(env, want) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitNoMarked fails the test unless every process carrying marker is gone
// within a generous deadline.
func waitNoMarked(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		pids := markedProcs(marker)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			var desc []string
			for _, p := range pids {
				cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
				desc = append(desc, fmt.Sprintf("%d %q", p, strings.ReplaceAll(string(cmdline), "\x00", " ")))
			}
			for _, p := range pids {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			t.Fatalf("S4 violated: sandbox processes outlived the sandbox: %s", strings.Join(desc, "; "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// drain reads r to the end, discarding it, and returns the byte count.
func drain(r io.Reader) int64 {
	n, _ := io.Copy(io.Discard, r)
	return n
}

// exists reports whether path exists (without following a final link).
func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// openPty opens a new pseudo-terminal pair. Both ends are closed when the
// test ends.
func openPty(t *testing.T) (master, slave *os.File) {
	t.Helper()
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open pty: %v", err)
	}
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(mfd)
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetUint32(mfd, unix.TIOCGPTN)
	if err != nil {
		unix.Close(mfd)
		t.Fatalf("pty number: %v", err)
	}
	sfd, err := unix.Open(fmt.Sprintf("/dev/pts/%d", n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(mfd)
		t.Fatalf("open pty slave: %v", err)
	}
	master, slave = os.NewFile(uintptr(mfd), "pty-master"), os.NewFile(uintptr(sfd), "pty-slave")
	t.Cleanup(func() { master.Close(); slave.Close() })
	return master, slave
}

// syncBuffer collects what a reader yields, for reading while it grows.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	n  atomic.Int64
}

// count reads r to its end (or error), only counting bytes.
func (s *syncBuffer) count(r io.Reader) {
	buf := make([]byte, 64<<10)
	for {
		k, err := r.Read(buf)
		s.n.Add(int64(k))
		if err != nil {
			return
		}
	}
}

// collect reads r to its end (or error), keeping the bytes.
func (s *syncBuffer) collect(r io.Reader) {
	buf := make([]byte, 4096)
	for {
		k, err := r.Read(buf)
		s.mu.Lock()
		s.b.Write(buf[:k])
		s.mu.Unlock()
		s.n.Add(int64(k))
		if err != nil {
			return
		}
	}
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor polls until the buffer holds substr or a generous deadline passes.
func (s *syncBuffer) waitFor(substr string) bool {
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(s.String(), substr) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// waitCount polls until the buffer counted n bytes or a generous deadline
// passes.
func (s *syncBuffer) waitCount(n int64) {
	deadline := time.Now().Add(time.Minute)
	for s.n.Load() < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}
