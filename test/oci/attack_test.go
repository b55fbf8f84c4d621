package oci

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/ocitest"
)

// capBits reads the capability sets of /proc/self/status lines (CapInh,
// CapPrm, CapEff, CapBnd, CapAmb) in out.
func capBits(t *testing.T, out string) map[string]uint64 {
	t.Helper()
	sets := map[string]uint64{}
	for _, l := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok || !strings.HasPrefix(k, "Cap") {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		sets[k] = n
	}
	if len(sets) != 5 {
		t.Fatalf("no capability sets in %q", out)
	}
	return sets
}

// attackDocker starts dockerd with the test image and the runtime
// "hutch": hutch-runc with no node policy (nothing allowed), and a
// context the test's commands end with.
func attackDocker(t *testing.T) (*ocitest.Docker, context.Context) {
	t.Helper()
	rt := ocitest.HutchRunc(t)
	d := ocitest.StartDocker(t, map[string]ocitest.Runtime{
		"hutch": {Path: rt, Args: []string{"--hutch-policy-dir", t.TempDir()}},
	})
	d.Load(t, imageTar(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return d, ctx
}

// Capability bits (linux/capability.h).
const (
	capNetAdmin = 12
	capNetRaw   = 13
	capSysAdmin = 21
)

// TestAttackExecCapabilities: a process that docker exec --privileged
// starts in a container whose egress hutch holds gets no capability over
// the network (with CAP_NET_RAW it would write raw packets, with
// CAP_NET_ADMIN change the namespace's interfaces and routes), as the
// container's own processes get none; the other capabilities the engine
// asked for it keeps, inside its user namespace.
func TestAttackExecCapabilities(t *testing.T) {
	d, ctx := attackDocker(t)

	if r := d.Run(ctx, "run", "-d", "--name", "held", "--runtime", "hutch", "--cap-add", "NET_ADMIN", "--cap-add", "NET_RAW", testImage, "sleep", "600"); r.Err != nil {
		t.Fatalf("run -d: %s", r)
	}
	defer d.Run(context.Background(), "rm", "-f", "held")
	for _, args := range [][]string{
		{"exec", "held", "grep", "^Cap", "/proc/self/status"},
		{"exec", "--privileged", "held", "grep", "^Cap", "/proc/self/status"},
	} {
		r := d.Run(ctx, args...)
		if r.Err != nil {
			t.Fatalf("%v: %s", args, r)
		}
		for set, bits := range capBits(t, r.Stdout) {
			if bits&(1<<capNetAdmin|1<<capNetRaw) != 0 {
				t.Errorf("%v: %s %#x holds CAP_NET_ADMIN or CAP_NET_RAW", args, set, bits)
			}
		}
		if privileged := args[1] == "--privileged"; privileged && capBits(t, r.Stdout)["CapEff"]&(1<<capSysAdmin) == 0 {
			t.Errorf("%v: no CAP_SYS_ADMIN: the probe did not get a privileged process\n%s", args, r)
		}
	}

	// A container that joins its network (docker run --network
	// container:held) gets the proxy, and a user namespace of its own
	// where runc can exec into it (1.2 and later); docker exec works.
	r := d.Run(ctx, "run", "-d", "--name", "joiner", "--network", "container:held", "--runtime", "hutch", testImage, "sleep", "600")
	if r.Err != nil {
		t.Fatalf("a container joining the network of another: %s", r)
	}
	r = d.Run(ctx, "exec", "joiner", "sh", "-c", "cat /proc/self/uid_map; echo proxy=$http_proxy; ls /sys/class/net")
	f := strings.Fields(r.Stdout)
	if r.Err != nil || len(f) < 3 || f[0] != "0" || !strings.Contains(r.Stdout, "proxy=http://127.0.0.1:3128") || ocitest.RuncJoinsUserLast(t) && f[1] == "0" {
		t.Errorf("a container joining the network of another: %s", r)
	}
}

// TestAttackEngineResolver: on a network of its own (docker network
// create, compose's default), Docker serves names from a resolver it
// opens on the container's loopback (127.0.0.11) and which forwards every
// other name to the node's resolvers: a channel out (a lookup of
// DATA.attacker.example) around hutch's proxy and DNS. A container whose
// egress hutch holds gets no answer from it; runc's container, the
// control, does.
func TestAttackEngineResolver(t *testing.T) {
	d, ctx := attackDocker(t)

	if r := d.Run(ctx, "network", "create", "attacknet"); r.Err != nil {
		t.Fatalf("network create: %s", r)
	}
	if r := d.Run(ctx, "run", "-d", "--name", "peer", "--network", "attacknet", testImage, "sleep", "600"); r.Err != nil {
		t.Fatalf("run -d: %s", r)
	}
	defer d.Run(context.Background(), "rm", "-f", "peer")
	// busybox's nslookup, straight at Docker's resolver, over UDP; nc
	// over TCP (a query of the peer's name, with its length first).
	probe := `nslookup peer 127.0.0.11 2>&1; echo udp=$?; ` +
		`echo tcp=$(printf '\000\026\000\001\001\000\000\001\000\000\000\000\000\000\004peer\000\000\001\000\001' | nc -w 3 127.0.0.11 53 | wc -c)`
	control := d.Run(ctx, "run", "--rm", "--network", "attacknet", testImage, "sh", "-c", probe)
	if !strings.Contains(control.Stdout, "udp=0") || strings.Contains(control.Stdout, "tcp=0") {
		t.Fatalf("runc's container gets no answer from Docker's resolver (the probe cannot succeed): %s", control)
	}
	r := d.Run(ctx, "run", "--rm", "--network", "attacknet", "--runtime", "hutch", testImage, "sh", "-c", probe)
	if !strings.Contains(r.Stdout, "tcp=0") || !strings.Contains(r.Stdout, "udp=1") || strings.Contains(r.Stdout, "172.") {
		t.Errorf("Docker's resolver answers a container of hutch-runc:\n%s\n(runc's: %s)", r, control)
	}
}

// TestAttackJoinerIdentity: a container that joins a network namespace
// made beforehand — every container of a Kubernetes pod: CRI makes the
// pod's namespace, then its sandbox and its containers join it — gets a
// user namespace of its own all the same: its root is not the host's,
// and --privileged (every capability) stays inside it. Its egress still
// goes through the namespace's proxy.
func TestAttackJoinerIdentity(t *testing.T) {
	ocitest.Need(t, "iproute2:ip")
	policies := t.TempDir()
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("real-token-value"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(policies, "pod.yaml"), []byte(fmt.Sprintf(`network:
  allowed_domains: ["upstream.test"]
secrets:
  - name: TOKEN
    hosts: ["upstream.test"]
    from: file:%s
`, token)), 0o644); err != nil {
		t.Fatal(err)
	}
	c := ocitest.StartContainerd(t, ocitest.PolicyDirEnv+"="+policies)
	c.Import(t, imageTar(t))
	rt := ocitest.HutchRunc(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	ns := fmt.Sprintf("hutch-attack-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	join := []string{"--runc-binary", rt, "--with-ns", "network:/var/run/netns/" + ns, "--annotation", "dev.hutch.policy=pod"}
	if r := c.Ctr(ctx, append(append([]string{"run", "-d"}, join...), testImage, "sandbox", "sleep", "600")...); r.Err != nil {
		t.Fatalf("the pod's first container: %s", r)
	}
	defer func() {
		c.Ctr(context.Background(), "tasks", "kill", "-s", "SIGKILL", "sandbox")
		testutil.Eventually(30*time.Second, func() bool { return strings.Contains(c.Ctr(ctx, "tasks", "ls").Stdout, "STOPPED") })
		c.Ctr(context.Background(), "tasks", "delete", "sandbox")
	}()
	// The sandbox's IPC namespace too, as CRI's containers join it.
	var pid string
	for _, l := range strings.Split(c.Ctr(ctx, "tasks", "ls").Stdout, "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "sandbox" {
			pid = f[1]
		}
	}
	if pid == "" {
		t.Fatalf("no pid of the sandbox in: %s", c.Ctr(ctx, "tasks", "ls"))
	}
	joinedUserns := ocitest.RuncJoinsUserLast(t)
	for _, args := range [][]string{
		{"app"},
		{"--privileged", "privileged"},
		{"--with-ns", "ipc:/proc/" + pid + "/ns/ipc", "ipc"},
	} {
		name := args[len(args)-1]
		run := func() ocitest.Result {
			return c.Ctr(ctx, append(append(append([]string{"run", "--rm"}, join...), args[:len(args)-1]...), testImage, name,
				"sh", "-c", "cat /proc/self/uid_map; echo proxy=$http_proxy token=$TOKEN; grep -c BEGIN $SSL_CERT_FILE; grep CapEff /proc/self/status; grep -c ' /dev/mqueue mqueue ' /proc/self/mounts; echo net: $(ls /sys/class/net) $(readlink /proc/self/ns/net); grep ' /sys ' /proc/self/mountinfo")...)
		}
		// The network's devices as its sysfs lists them ("net: lo ...").
		sysfsOK := func(r ocitest.Result) bool {
			for _, l := range strings.Split(r.Stdout, "\n") {
				if f := strings.Fields(l); len(f) > 0 && f[0] == "net:" && slices.Contains(f[1:], "lo") {
					return strings.Contains(r.Stdout, "\n1\n")
				}
			}
			return false
		}
		r := run()
		if r.Err == nil && !sysfsOK(r) {
			// Seen once on a busy machine, not reproduced: the sysfs
			// listed no device. What the container saw is kept, and
			// the container runs again; a second time fails.
			t.Logf("%s: no mqueue, or no device in the sysfs of its network (%s); once more", name, r)
			r = run()
		}
		if r.Err != nil || !strings.Contains(r.Stdout, "proxy=http://127.0.0.1:3128") || strings.Contains(r.Stdout, "token=\n") || strings.Contains(r.Stdout, "real-token-value") || strings.Contains(r.Stdout, "\n0\n") {
			t.Errorf("%s: %s", name, r)
			continue
		}
		if !sysfsOK(r) {
			t.Errorf("%s: no mqueue at /dev/mqueue, or no sysfs of its network: %s", name, r)
		}
		if !joinedUserns {
			// runc 1.1: no user namespace for a joiner (an exec into
			// it would fail); the rest holds.
			continue
		}
		if f := strings.Fields(r.Stdout); len(f) < 3 || f[0] != "0" || f[1] == "0" || f[2] != "65536" {
			t.Errorf("%s runs as the host's root (uid_map %q)", name, f[:min(3, len(f))])
		}
	}
}
