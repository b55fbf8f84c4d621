package ociruntime

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestRestoreRefused: runc restore would make a container from the
// engine's bundle as it is — no user namespace, no hutch init, no hooks,
// so no firewall and no proxy: hutch-runc refuses it, saying why, rather
// than hand it over.
func TestRestoreRefused(t *testing.T) {
	root := t.TempDir()
	r := &runtime{root: root}
	for _, args := range [][]string{
		{"restore", "--bundle", "/b", "c1"},
		{"--root", root, "restore", "--image-path", "/ckpt", "-b", "/b", "--detach", "c1"},
	} {
		cl, err := parseCmdline(args)
		if err != nil {
			t.Fatal(err)
		}
		out, err := r.command(cl)
		if err == nil || !strings.Contains(err.Error(), "restore is not supported") {
			t.Errorf("%q: %q, %v", args, out, err)
		}
	}
}

// TestExecDropsEgressCaps: a process exec starts in a container whose
// egress hutch holds gets no capability over the network, whether its
// engine asked for it in the process (docker exec --privileged) or on
// runc's command line (--cap); a container on the host's policy keeps
// what it was given.
func TestExecDropsEgressCaps(t *testing.T) {
	root := t.TempDir()
	r := &runtime{root: root}
	all := []string{"CAP_CHOWN", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_SYS_ADMIN"}
	proc := specs.Process{Args: []string{"sh"}, Cwd: "/", Capabilities: &specs.LinuxCapabilities{
		Bounding: all, Effective: all, Permitted: all, Inheritable: all, Ambient: all}}
	pf := filepath.Join(t.TempDir(), "process.json")
	if err := writeJSON(pf, proc); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"none", "proxy", "host"} {
		id := "c-" + mode
		dir := r.stateDir(id)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := writeJSON(filepath.Join(dir, "confinement.json"), Confinement{Writable: []string{"/"}}); err != nil {
			t.Fatal(err)
		}
		if err := writeJSON(filepath.Join(dir, egressFile), egressPlan{Mode: mode}); err != nil {
			t.Fatal(err)
		}
		held := mode != "host"

		cl, err := parseCmdline([]string{"exec", "--process", pf, "--detach", id})
		if err != nil {
			t.Fatal(err)
		}
		out, err := r.command(cl)
		if err != nil {
			t.Fatalf("%s: exec --process: %v", mode, err)
		}
		i := slices.Index(out, "--process")
		if i < 0 || !strings.HasPrefix(out[i+1], "/proc/self/fd/") {
			t.Fatalf("%s: %q", mode, out)
		}
		fd, _ := strconv.Atoi(strings.TrimPrefix(out[i+1], "/proc/self/fd/"))
		var got specs.Process
		err = readJSON(out[i+1], &got)
		syscall.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		c := got.Capabilities
		for name, set := range map[string][]string{"bounding": c.Bounding, "effective": c.Effective, "permitted": c.Permitted, "inheritable": c.Inheritable, "ambient": c.Ambient} {
			hasNet := slices.Contains(set, "CAP_NET_ADMIN") || slices.Contains(set, "CAP_NET_RAW")
			if hasNet == held || !slices.Contains(set, "CAP_SYS_ADMIN") {
				t.Errorf("mode %s: exec's %s set %v", mode, name, set)
			}
		}

		cl, err = parseCmdline([]string{"exec", "--cap", "CAP_NET_RAW", "--cap=net_admin", "-c", "CAP_CHOWN", "-c", "Cap_Net_Raw", id, "ping", "x"})
		if err != nil {
			t.Fatal(err)
		}
		if out, err = r.command(cl); err != nil {
			t.Fatalf("%s: exec --cap: %v", mode, err)
		}
		line := strings.Join(out, " ")
		hasNet := strings.Contains(strings.ToUpper(line), "NET_")
		if hasNet == held || !strings.Contains(line, "-c CAP_CHOWN") || !strings.Contains(line, "/dev/hutch oci-init") {
			t.Errorf("mode %s: exec's command line %q", mode, line)
		}
	}
}

// TestJoinerEgressMustMatch: a container that joins a network namespace
// whose proxy another container's hook started shares that proxy only
// with the same egress: a host policy (which would keep its capabilities
// over the network), other secrets with the same count, other rules in
// the same policy name's section are refused; the same egress is taken.
func TestJoinerEgressMustMatch(t *testing.T) {
	root := t.TempDir()
	owner := filepath.Join(root, "hutch", "pod")
	if err := os.MkdirAll(owner, 0o700); err != nil {
		t.Fatal(err)
	}
	ownerPlan := egressPlan{Mode: "proxy", Policy: "web", Operator: true,
		Network:      policy.Network{AllowedDomains: []string{"pypi.org"}},
		Secrets:      []policy.Secret{{Name: "A", Hosts: []string{"a.test"}, From: "env:A"}},
		Placeholders: map[string]string{"A": "placeholder_a"},
		Files:        t.TempDir()}
	if err := writeJSON(filepath.Join(owner, egressFile), ownerPlan); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ownerPlan.Files, caFile), []byte("the proxy's CA"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The owner's proxy: a process whose command line names its state.
	// In a process group of its own, ended whole: sh's sleep is a child.
	proxy := exec.Command("sh", "-c", "sleep 600", "egress-proxy", owner)
	proxy.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { syscall.Kill(-proxy.Process.Pid, syscall.SIGKILL); proxy.Wait() }()
	if err := os.WriteFile(filepath.Join(owner, proxyPidFile), []byte(strconv.Itoa(proxy.Process.Pid)), 0o600); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/net", &st); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(netIndex(owner), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(owner, filepath.Join(netIndex(owner), strconv.FormatUint(st.Ino, 10))); err != nil {
		t.Fatal(err)
	}

	n := 0
	join := func(change func(*egressPlan)) (specs.Spec, egressPlan, error) {
		n++
		dir := filepath.Join(root, "hutch", "c"+strconv.Itoa(n))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		s := specs.Spec{
			Process: &specs.Process{Args: []string{"sh"}, Env: []string{"PATH=/bin"},
				Capabilities: &specs.LinuxCapabilities{Bounding: []string{"CAP_NET_RAW", "CAP_CHOWN"}}},
			Root:  &specs.Root{Path: t.TempDir()},
			Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.NetworkNamespace, Path: "/proc/self/ns/net"}}},
		}
		plan := ownerPlan
		plan.Placeholders = nil
		plan.Network.AllowedDomains = slices.Clone(ownerPlan.Network.AllowedDomains)
		plan.Secrets = slices.Clone(ownerPlan.Secrets)
		plan.Files = t.TempDir()
		change(&plan)
		err := prepareEgress(&s, dir, plan)
		var got egressPlan
		if err == nil {
			err = readJSON(filepath.Join(dir, egressFile), &got)
		}
		return s, got, err
	}

	s, got, err := join(func(*egressPlan) {})
	if err != nil || got.Placeholders["A"] != "placeholder_a" || !slices.Contains(s.Process.Env, "A=placeholder_a") ||
		slices.Contains(s.Process.Capabilities.Bounding, "CAP_NET_RAW") {
		t.Errorf("the same egress: %v %+v %v", err, got, s.Process)
	}
	if b, err := os.ReadFile(filepath.Join(got.Files, caFile)); err != nil || string(b) != "the proxy's CA" {
		t.Errorf("the joining container's copy of the CA: %q %v", b, err)
	}
	if i := slices.IndexFunc(s.Mounts, func(m specs.Mount) bool { return strings.HasSuffix(m.Source, caFile) }); i >= 0 && filepath.Dir(s.Mounts[i].Source) != got.Files {
		t.Errorf("the CA is bound from %s, not from the joining container's files", s.Mounts[i].Source)
	}
	for name, change := range map[string]func(*egressPlan){
		"a host policy":             func(p *egressPlan) { p.Mode, p.Policy, p.Network = "host", "open", policy.Network{Mode: "host"} },
		"the host mode of the same": func(p *egressPlan) { p.Mode = "host" },
		"another secret": func(p *egressPlan) {
			p.Secrets = []policy.Secret{{Name: "B", Hosts: []string{"b.test"}, From: "env:B"}}
		},
		"other private addresses": func(p *egressPlan) { p.Network.AllowPrivate = []string{"10.0.0.0/8"} },
		"the creator's domains":   func(p *egressPlan) { p.Network.AllowedDomains = []string{"*"}; p.Operator = false },
		"an agent's port":         func(p *egressPlan) { p.AgentPort = 7443 },
	} {
		if _, _, err := join(change); err == nil || !strings.Contains(err.Error(), "egress policy differs") {
			t.Errorf("%s: %v", name, err)
		}
	}

	// The owner's proxy has ended (its container did; its poststop has
	// not run yet): the namespace's link is stale, its inode number
	// another namespace's, which the container owns: no placeholders
	// of the old owner, no link to it.
	proxy.Process.Kill()
	proxy.Wait()
	_, got, err = join(func(p *egressPlan) { p.Secrets, p.Placeholders = nil, nil })
	if err != nil || got.Placeholders["A"] != "" {
		t.Errorf("a stale owner: %+v %v", got, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "hutch", "c"+strconv.Itoa(n), ownerLink)); err == nil {
		t.Errorf("a stale owner is taken as the namespace's")
	}
}

// TestAnnotationsDoNotWidenNone: a node policy that says network.mode
// none (or host) takes no destinations from the container's creator: the
// annotation would otherwise turn "nothing" into whatever it names ("*:*"
// is every public address on every port). A policy with rules still
// takes them, as the creator's.
func TestAnnotationsDoNotWidenNone(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"closed": "network:\n  mode: none\n",
		"open":   "network:\n  mode: host\n",
		"web":    "network:\n  allowed_domains: [\"pypi.org\"]\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"closed", "open"} {
		_, err := planEgress(map[string]string{AnnotationAllowDomains: "*:*"}, name, dir)
		if err == nil || !strings.Contains(err.Error(), "adds no destinations") {
			t.Errorf("policy %s with the creator's *:*: %v", name, err)
		}
	}
	if plan, err := planEgress(map[string]string{AnnotationAllowDomains: "*:*"}, "web", dir); err != nil || plan.Operator {
		t.Errorf("policy web with the creator's *:*: %+v %v", plan, err)
	}
}

// TestJoinersGetUserns: a container that joins a network or IPC
// namespace by path (a pod's) gets a user namespace of its own; one whose
// spec has a user namespace, or that joins a process namespace, keeps
// the spec's identity.
func TestJoinersGetUserns(t *testing.T) {
	spec := func(ns ...specs.LinuxNamespace) *specs.Spec { return &specs.Spec{Linux: &specs.Linux{Namespaces: ns}} }
	net := specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: "/var/run/netns/cni-1"}
	ipc := specs.LinuxNamespace{Type: specs.IPCNamespace, Path: "/proc/7/ns/ipc"}
	for _, tc := range []struct {
		s    *specs.Spec
		want bool
	}{
		{spec(specs.LinuxNamespace{Type: specs.NetworkNamespace}, specs.LinuxNamespace{Type: specs.MountNamespace}), true},
		{spec(net, specs.LinuxNamespace{Type: specs.MountNamespace}), true},
		{spec(net, ipc, specs.LinuxNamespace{Type: specs.UTSNamespace, Path: "/proc/7/ns/uts"}), true},
		{spec(net, specs.LinuxNamespace{Type: specs.PIDNamespace, Path: "/proc/7/ns/pid"}), false},
		{spec(specs.LinuxNamespace{Type: specs.UserNamespace}), false},
	} {
		if got := needsUserns(tc.s); got != tc.want {
			t.Errorf("%+v: needsUserns %v, want %v", tc.s.Linux.Namespaces, got, tc.want)
		}
	}
}

// TestTrustBundleInImage: the image's CA bundle paths are looked up in
// the image: a symbolic link that names a file of the host, absolutely or
// by climbing, is a link to nothing in the image (no bind over it, the
// host's file neither looked at nor named), one within the image counts.
func TestTrustBundleInImage(t *testing.T) {
	testutil.RequireRoot(t)
	root := t.TempDir()
	host := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(host, []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"etc/ssl/certs", "etc/pki/tls/certs"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"etc/ssl/certs/ca-certificates.crt": host,
		"etc/pki/tls/certs/ca-bundle.crt":   "../../../../../../../../.." + host,
		"etc/ssl/ca-bundle.pem":             "../ssl/cert.pem",
	}
	for l, target := range links {
		if err := os.Symlink(target, filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc/ssl/cert.pem"), []byte("image"), 0o644); err != nil {
		t.Fatal(err)
	}
	paths, env, err := trustBundleIn(root, []string{"A=1"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/etc/ssl/ca-bundle.pem", "/etc/ssl/cert.pem"}; !slices.Equal(paths, want) {
		t.Errorf("bundles %v, want %v", paths, want)
	}
	if !slices.Contains(env, "SSL_CERT_FILE=/etc/ssl/ca-bundle.pem") || !slices.Contains(env, "A=1") {
		t.Errorf("env %v", env)
	}
	// The calling thread's root is the host's still.
	if _, err := os.Stat(host); err != nil {
		t.Errorf("after the lookup: %v", err)
	}
}

// TestGVisorAnnotationsRefused: under the gVisor tier, a container's
// creator sets no annotation of gVisor's that changes runsc's flags or
// reaches the host's files (a root file system, an upper layer or a
// restore read from a host path, devices of the host, another cgroup):
// the create fails naming it. The ones gVisor's shim writes into a pod's
// bundles pass: mount hints, empty-dir settings, and the pod's cgroup of
// the container's own cgroups path. Under runc they mean nothing and
// pass.
func TestGVisorAnnotationsRefused(t *testing.T) {
	o := Options{Binary: "/usr/bin/hutch-runc", StateDir: "/run/hutch-runc/hutch/c1", Tier: TierGVisor}
	const cgroups = "/kubepods/burstable/pod1234/abcd"
	spec := func(k, v string) *specs.Spec {
		s := testSpec()
		s.Linux.CgroupsPath = cgroups
		s.Annotations = map[string]string{k: v, "io.kubernetes.cri.container-type": "sandbox"}
		return s
	}
	for k, v := range map[string]string{
		"dev.gvisor.flag.debug":                           "true",
		"dev.gvisor.flag.host-uds":                        "all",
		"dev.gvisor.flag.overlay2":                        "root:self",
		"dev.gvisor.flag.allow-flag-override":             "true",
		"dev.gvisor.bundle.experimental-high-performance": "true",
		"dev.gvisor.spec.rootfs.source":                   "/etc/shadow",
		"dev.gvisor.spec.rootfs.type":                     "erofs",
		"dev.gvisor.tar.rootfs.upper":                     "/root/secrets.tar",
		"dev.gvisor.tar.rootfs.upper.c1":                  "/root/secrets.tar",
		"dev.gvisor.internal.checkpoint.path":             "/var/lib",
		"dev.gvisor.internal.nvproxy":                     "true",
		"dev.gvisor.internal.seccomp.c1":                  "RuntimeDefault",
		"dev.gvisor.container-name-remap.1":               "a=b",
		"dev.gvisor.spec.cgroup-parent":                   "/",
		"dev.gvisor.spec.mount.vol":                       "x",
		"dev.gvisor.spec.mount.vol.bogus":                 "x",
		"dev.gvisor.spec.mount..source":                   "/x",
		"dev.gvisor.something-new":                        "x",
	} {
		if _, err := Harden(spec(k, v), "/bundle", o); err == nil || !strings.Contains(err.Error(), "annotation "+k+":") {
			t.Errorf("%s=%s: %v", k, v, err)
		}
		if _, err := Harden(spec(k, v), "/bundle", Options{Binary: o.Binary, StateDir: o.StateDir}); err != nil {
			t.Errorf("%s=%s under runc: %v", k, v, err)
		}
	}
	for k, v := range map[string]string{
		"dev.gvisor.spec.mount.gvisorinternaldevshm.source": "/run/containerd/shm",
		"dev.gvisor.spec.mount.gvisorinternaldevshm.type":   "tmpfs",
		"dev.gvisor.spec.mount.gvisorinternaldevshm.share":  "pod",
		"dev.gvisor.spec.mount.data.options":                "rw",
		"dev.gvisor.spec.mount.data.directfs":               "off",
		"dev.gvisor.empty-dir.data.force-shared":            "true",
		"dev.gvisor.spec.cgroup-parent":                     "/kubepods/burstable/pod1234",
		"dev.hutch.policy":                                  "web",
	} {
		if _, err := Harden(spec(k, v), "/bundle", o); err != nil {
			t.Errorf("%s=%s: %v", k, v, err)
		}
	}
	for path, want := range map[string]string{
		"kubepods/pod1/c": "kubepods/pod1",
		"/a/b":            "",
		"/kubepods/pod1":  "",
		"":                "",
	} {
		s := testSpec()
		s.Linux.CgroupsPath = path
		if got, ok := podCgroup(s); got != want && ok {
			t.Errorf("podCgroup(%q) = %q, want %q", path, got, want)
		} else if ok != (want != "") {
			t.Errorf("podCgroup(%q) = %q %v", path, got, ok)
		}
	}
}
