// Package escape is hutch's escape suite. It runs the attacks of the
// project's attack list (ESCAPES.md: credential reads, persistence writes,
// path and process tricks, privilege, resources, host sockets, terminal
// injection, network egress, policy and harness tricks) inside real
// sandboxes started by the built hutch binary, and asserts for each that
//
//   - the attack failed in the specific way it should (an errno, a
//     "Permission denied", absent data), not merely with some non-zero exit;
//   - a harmless control variant in the same sandbox still works, so that
//     the test is able to fail;
//   - where the attack could leave a trace on the host, the host is
//     unchanged afterwards: file trees compared entry by entry, no
//     placeholder left behind, no sandbox process still running, no
//     connection accepted by a host listener.
//
// Every test runs under the isolation tiers namespace and gVisor, as the
// parallel subtests "namespace" and "gvisor", and some under the microvm
// tier too (below) (the table tiers in the harness; forEachMode
// runs a test's body once per tier and per who starts hutch, so no test
// is copied). Under "namespace" it runs twice, as "root" and "user": once
// with hutch started by root (the sandbox runs as uid 0 of its own user
// namespace, an unused uid on the host) and once with hutch started by the
// unprivileged uid testutil.UnprivilegedUID. Under "gvisor" (hutch run
// --tier gvisor, with the runsc of $HUTCH_TEST_RUNSC, see testutil.Runsc)
// it runs as "root" only: the tier runs as root only in this version; and
// twice, as "root" (gVisor's file access through its gofer, the default)
// and "root-directfs" (--gvisor-directfs: gVisor's kernel opens the files
// itself and holds file capabilities in the sandbox's user namespace,
// under which every property must hold too) — but for the few tests of
// what goes through gVisor's network stack, the output pipe or the
// cgroup's limits, none of which file access takes part in (the table
// notUnderDirectFS, whose reason the skipped subtest prints). Each
// run gets a workspace and a fake home directory of its own (outside /tmp,
// which the sandbox replaces). The test process itself must be root, so
// the suite skips on a developer machine and fails under HUTCH_TEST_ROOT=1,
// as CI runs it:
//
//	sudo HUTCH_TEST_ROOT=1 HUTCH_TEST_RUNSC=/path/to/runsc go test -count=1 ./test/escape/
//
// Not under gVisor, by design (the table notUnderGVisor, whose reason the
// skipped "gvisor" subtest prints): what needs a policy the tier refuses
// (policy.TierRefusals) — the host's network (TestItem15_NetHost) — and
// what tests a mechanism of the namespace tier that gVisor does not
// have: TestItem10_StandIns (the stand-ins hutch serves over hidden and
// protected paths; gVisor masks with empty files and tmpfs),
// TestItem07_ReviewModeWrites (review mode, refused under gVisor in this
// version), and
// TestItem21_Umask (the supervisor that keeps the umask's withheld bits;
// ARCHITECTURE documents that gVisor has no counterpart). Nor does
// anything run as an ordinary user under gVisor.
//
// Under the microvm tier (hutch run --tier microvm --allow-emulation,
// with the guest kernel of $HUTCH_TEST_GUEST_KERNEL, as root, which the
// tier needs) run only the tests of the table underMicroVM, as the
// subtest "microvm/root": the items of the filesystem (ESCAPES 1, 3–7,
// 21–24), environment (2), network (13, 15–18) and secrets (19) classes
// as they apply to hutch run, each in one guest or as few as its attacks
// allow (every guest boots under QEMU's software emulation on a machine
// without KVM, several CPU-seconds). The items of those classes left out
// are in notUnderMicroVM with the reason the skipped subtest prints: a
// policy the tier refuses (a writable home, --net host, review mode),
// attacks on the home through links and the host's other mounts (the
// guest sees no home of the host's; the credential items run with the
// home as the workspace instead), the umask's supervisor, socket
// families (the guest kernel's own), what hutch refuses on the host
// before any sandbox starts, and hutch serve's. The items of the other
// classes (processes, privilege, resources, sockets by path, terminals,
// policy, hutch serve and mcp) do not run under the microvm tier. Where the guest answers
// differently and legitimately, the test says why under microvm: its
// root (the workspace's owner) holds every capability of its own kernel
// (raw sockets, extended attribute calls it lacks: ENOSYS, its PID 1's
// /proc files), and a hidden file reads empty, as under gVisor.
//
// The tests of hutch serve (TestItem21_ServedLayer, _CpFromServed,
// TestItem26..30, TestItem27_ServedPID1, TestSandboxPortsHostRouting,
// TestItem08_BootID) start a daemon of each tier in
// turn (forEachServedTier: the parallel subtests "namespace" and
// "gvisor", the latter with hutch serve --default-tier gvisor), so every
// sandbox they make is of that tier; servedNotUnderGVisor names those
// that skip the gVisor daemon, with the reason (none today).
// TestItem21_GuestSnapshot starts a daemon of the microvm tier (under
// emulation, a busybox image in its store) for what only a guest's root
// can make in its layer and a snapshot then brings to the host.
// TestItem07_Volumes attacks a served sandbox's volumes (host directories
// of the daemon's shown in it): no front end takes volumes in this
// version, so it runs a daemon (daemon.Manager) of each tier in the test
// process, whose sandboxes are real ones with the built hutch-agent as
// their PID 1.
//
// Where gVisor's kernel answers an attack differently and legitimately,
// the test asserts, under "gvisor", the security property rather than the
// namespace tier's errno, and says why in a comment (the namespace
// assertions are unchanged): a deny-read file is masked by an empty file,
// so reading it succeeds and yields nothing; in mode none PID 1 is the
// command itself (in mode proxy it is hutch's relay, attacked as the
// namespace tier's init is, and /proc/PID/map_files does not exist: ENOENT);
// in mode none no host unix socket is reachable at all (runsc runs with
// --host-uds=none); the sandbox's
// processes are not host processes, and what must die with hutch is runsc
// and its sandbox and gofer; calls and families gVisor implements itself
// (keyrings, nested namespaces, netlink, ICMP sockets) act on gVisor's
// kernel only; calls it lacks fail with ENOSYS, ENOTTY or ENOTSUP. The
// harness's gvisorAlso adds such results to an attack's expected ones
// under the gVisor tier only. TestGVisorKernel checks what only gVisor
// has: uname -r and -v, /proc/version and dmesg are gVisor's kernel's,
// never the host's (the namespace run of the same script, showing the
// host's release, is its control).
//
// Tests are named TestItemNN_What after the ESCAPES.md item they cover and
// name the security invariants (S1..S7) in their comments. Attacks that need
// a system call rather than a shell command go through the static program in
// the attacker directory, which is copied into the workspace and prints one
// "ATTACK RESULT" line per attack, RESULT being "ok" or the errno's name, so
// tests assert the exact outcome.
//
// What it covers, by ESCAPES.md item (every item has a test):
//
//	1  credential files                     TestItem01_CredentialFiles
//	2  secrets in the environment           TestItem02_*
//	3  host-root-only files                 TestItem03_HostRootOnlyFiles
//	4  shell rc files                       TestItem04_ShellRCWorkspace, _ShellRCHome
//	5  git hooks and config                 TestItem05_Git, _SubmoduleGitDir
//	6  tool config that runs code           TestItem06_ToolConfigWorkspace, _AutostartHome
//	7  symlinks, links, renames             TestItem07_* (a workspace entered through a link too;
//	                                        in review mode nothing reaches the workspace:
//	                                        TestItem07_ReviewModeWrites; links a sandbox
//	                                        leaves in a volume, for E2B's content API:
//	                                        TestItem07_VolumeContentPaths)
//	8  /proc and other processes            TestItem08_ProcAndProcesses, _BootID (a served
//	                                        sandbox's own boot ID, fixed in its view)
//	9  staying alive                        TestItem09_*; for the microvm tier, whose
//	                                        guests this item does not boot, in
//	                                        cmd/hutch: TestMicroVMDiesWithHutch,
//	                                        TestServeMicroVMDiesWithDaemon (QEMU stopped,
//	                                        hutch or the daemon killed: QEMU and
//	                                        virtiofsd end, no VM directory is left)
//	10 privilege and kernel surface         TestItem10_* (the stand-ins hutch serves over hidden
//	                                        and protected paths, as root and as a user whose
//	                                        sandbox mounts them: TestItem10_StandIns)
//	11 resources                            TestItem11_*
//	12 host unix sockets                    TestItem12_HostUnixSockets
//	13 abstract sockets, socket families    TestItem13_*
//	14 terminal injection                   TestItem14_TerminalInjection
//	15–18 network egress, DNS, filters, SSRF TestItem15_* … TestItem18_* (hosts no rule
//	                                        allows, asked about on hutch run's terminal
//	                                        and answered: TestItem18_SSRFAskedHosts)
//	19 placeholders of secrets              TestItem19_Placeholders
//	20 policy and harness                   TestItem20_*
//	21 privilege granted by what is written TestItem21_* (set-id modes by every call, file
//	                                        capabilities and ACLs, umask, a .git made
//	                                        writable, copies, hutch cp, served layers,
//	                                        a served review workspace's apply, a microVM
//	                                        guest's root layer in its snapshot:
//	                                        TestItem21_GuestSnapshot)
//	22 git beyond .git/config and hooks     TestItem22_GitEverywhere
//	23 other tools' configuration           TestItem23_ToolConfig
//	24 more credential stores               TestItem24_CredentialStores, _DiffShowsOnlyTheView
//	                                        (a served sandbox's diff: the hidden and closed
//	                                        host files stay out)
//	25 hutch's own sockets and state        TestItem25_HutchDaemon, _ServeRefusesSandboxPeers,
//	                                        _ServedAgentSocket, _ServedAgentSocketGVisor (the
//	                                        socket and token a served sandbox keeps for the
//	                                        next daemon, in the gVisor tier in its view),
//	                                        TestItem27_MCPSession (hutch mcp's links and ports)
//	26 a tenant's rules and special addresses TestItem26_TenantNetworkRules, _UpdateNetwork
//	                                        (a running sandbox's rules changed: no wider than a
//	                                        create's, another tenant's as unknown)
//	27 the sandbox's PID 1                  TestItem27_RunPID1, _ServedPID1, _MCPSession (hutch
//	                                        mcp's session sandbox, in proxy mode); on
//	                                        Kubernetes (test/k8s): TestHutchCluster/agent_pod (the pod's
//	                                        agent: token, own address, other ports, its
//	                                        environment), TestServeKubernetes (a sandbox
//	                                        reaches no other's agent, no kubelet, no API
//	                                        server, no service account token)
//	28 host memory held by a tenant         TestItem28_TenantMemory
//	29 a secret reflected in a response     TestItem29_SecretReflected
//	30 unaudited changes, oracles, metrics  TestItem30_AuditAndOracles, _MCPTenants,
//	                                        _MCPFileToolsHostReach, _SnapshotsAcrossTenants
//	                                        (snapshots, forks, diffs of another tenant's),
//	                                        _TemplatesAcrossTenants (E2B's templates, their
//	                                        builds and uploads; a build's steps confined)
//	                                        _WakeAcrossTenants (E2B's autoResume wakes a
//	                                        sandbox for its own tenant's requests only),
//	                                        _VolumesAcrossTenants (E2B's volumes: tokens,
//	                                        ids and names of another's)
//	-- an image's layers (hostile input)    TestImageLayersHostile (dot-dot, absolute names, a
//	                                        planted symbolic link as a parent, hard links out,
//	                                        whiteouts through a link, device nodes, set-id bits)
//	-- a sandbox from an image              TestImageRootEscapes (host files out of view, writes to
//	                                        the root in memory only, protections, the store intact)
//	-- sandbox ports, E2B's domain layout   TestSandboxPortsHostRouting (hutch serve --domain: no
//	                                        host spelling, absolute URI, X-Forwarded-Host, API key
//	                                        or other sandbox's token opens a port or the API; a
//	                                        port never reaches the host's loopback)
//
// The suite sends no traffic off the machine: it listens only on the host's
// own addresses, and the outside addresses it tries are from TEST-NET or
// other ranges to which the sandbox has no route, so connecting fails
// before any packet is sent.
package escape
