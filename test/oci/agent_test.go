package oci

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/ocitest"
)

// TestContainerdAgent: a container with dev.hutch.agent runs hutch's agent
// as its process, under runc (behind hutch's init) and under gVisor (the
// binary bound in for it), which a client in another network namespace
// reaches at the container's address with the token from the container's
// environment: its commands run with no_new_privs, without the token in
// their environment or the agent's (/proc/1/environ, as root and as
// another user), with the node policy's egress; ctr's exec gets no token
// either, and the container's other ports take no connection from
// outside. An annotation that is not a port fails the create, and so,
// under gVisor, does an annotation of gVisor's that would change runsc's
// flags or have it read the host's files.
func TestContainerdAgent(t *testing.T) {
	ocitest.Need(t, "iproute2:ip")
	runsc := testutil.Runsc(t)
	policies := t.TempDir()
	c := ocitest.StartContainerd(t, ocitest.PolicyDirEnv+"="+policies, "HUTCH_RUNSC="+runsc)
	c.Import(t, imageTar(t))
	rt := ocitest.HutchRunc(t)
	gvisor := filepath.Join(t.TempDir(), "hutch-runsc")
	if err := os.Symlink(rt, gvisor); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	port := ocitest.LoopbackUpstream(t, "hello from the node's upstream\n")
	ocitest.LoopbackPolicy(t, policies, "upstream", "upstream.test", port)
	const token = "the-container-agent-token"

	r := c.Ctr(ctx, "run", "--rm", "--annotation", "dev.hutch.agent=0", "--runc-binary", rt, testImage, "bad", "true")
	if r.Code == 0 || !strings.Contains(r.Stderr, `annotation dev.hutch.agent: "0" is not a TCP port`) {
		t.Errorf("annotation dev.hutch.agent=0: %s", r)
	}
	// Under gVisor, annotations of gVisor's that would change runsc's
	// flags or have it read host files fail the create, naming them.
	for _, ann := range []string{
		"dev.gvisor.tar.rootfs.upper=/etc/shadow",
		"dev.gvisor.spec.rootfs.source=/etc/shadow",
		"dev.gvisor.flag.host-uds=all",
		"dev.gvisor.bundle.experimental-high-performance=true",
		"dev.gvisor.spec.cgroup-parent=/",
	} {
		r := c.Ctr(ctx, "run", "--rm", "--annotation", ann, "--runc-binary", gvisor, testImage, "bad", "true")
		if k, _, _ := strings.Cut(ann, "="); r.Code == 0 || !strings.Contains(r.Stderr, "annotation "+k+":") {
			t.Errorf("annotation %s under gVisor: %s", ann, r)
		}
	}

	for i, runtime := range []string{rt, gvisor} {
		t.Run(filepath.Base(runtime), func(t *testing.T) {
			client, server := vethPair(t, i)
			name := fmt.Sprintf("agent%d", i)
			// A mount hint of gVisor's (incomplete, so unused) is
			// taken under both.
			if r := c.Ctr(ctx, "run", "-d", "--runc-binary", runtime, "--with-ns", "network:"+server.ns,
				"--annotation", "dev.hutch.agent=7443", "--annotation", "dev.hutch.policy=upstream", "--annotation", "dev.gvisor.spec.mount.unused.share=pod",
				"--env", agent.TokenEnv+"="+token, testImage, name, "sh", "-c", "echo the image's command ran; sleep 600"); r.Err != nil {
				t.Fatalf("ctr run: %s", r)
			}
			defer func() {
				c.Ctr(ctx, "tasks", "kill", "-s", "SIGKILL", name)
				testutil.Eventually(30*time.Second, func() bool { return c.Ctr(ctx, "tasks", "delete", name).Err == nil })
				c.Ctr(ctx, "containers", "delete", name)
			}()
			dial := func(context.Context) (net.Conn, error) {
				return ocitest.DialIn(client.ns, "tcp", net.JoinHostPort(server.addr, "7443"), time.Minute)
			}
			ac := ocitest.WaitAgent(t, ctx, dial, token, nil)
			out, st := ocitest.AgentRun(t, ctx, ac, nil, fmt.Sprintf(
				"dmesg | head -1; grep NoNewPrivs /proc/self/status; env; busybox cat /proc/1/environ; fetch http://upstream.test:%d/; exit 3", port))
			if st.Code != 3 {
				t.Errorf("exit %+v, want code 3:\n%s", st, out)
			}
			for _, want := range []string{"NoNewPrivs:\t1", "hello from the node's upstream"} {
				if !strings.Contains(out, want) {
					t.Errorf("no %q in:\n%s", want, out)
				}
			}
			if onGVisor := strings.Contains(out, "gVisor"); onGVisor != (runtime == gvisor) {
				t.Errorf("gVisor's kernel %v under %s:\n%s", onGVisor, runtime, out)
			}
			if strings.Contains(out, agent.TokenEnv) || strings.Contains(out, token) {
				t.Errorf("the agent's token in a command's environment:\n%s", out)
			}
			// The runtime's exec with a command rather than --process
			// (no engine's): the container's environment, without the
			// token.
			cmd := exec.CommandContext(ctx, runtime, "--root", filepath.Join("/run/containerd/runc", c.Namespace), "exec", name, "env")
			cmd.Env = append(os.Environ(), "HUTCH_RUNSC="+runsc)
			if b, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(b), "PATH=") || strings.Contains(string(b), token) {
				t.Errorf("%s exec %s env: %v\n%s", runtime, name, err, b)
			}
			if out, _ := ocitest.AgentRun(t, ctx, ac, &agent.Credential{UID: 1000, GID: 1000}, "busybox cat /proc/1/environ"); strings.Contains(out, token) {
				t.Errorf("the agent's token in its environment, for another user:\n%s", out)
			}
			if r := c.Ctr(ctx, "tasks", "exec", "--exec-id", "env", name, "env"); r.Err != nil || !strings.Contains(r.Stdout, "PATH=") || strings.Contains(r.Stdout, agent.TokenEnv) {
				t.Errorf("ctr tasks exec env: %s", r)
			}

			// A server on another port, for every connection (gVisor's
			// /proc/net/tcp does not show the namespace's sockets).
			p, err := ac.Exec(ctx, agent.ExecRequest{Args: []string{"sh", "-c", "while :; do nc -l -p 8081 </dev/null; done"}})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Signal(syscall.SIGKILL)
			inside := func() bool {
				out, _ := ocitest.AgentRun(t, ctx, ac, nil, "attacker tcp:127.0.0.1:8081")
				return strings.Contains(out, " ok")
			}
			if !testutil.Eventually(time.Minute, inside) {
				t.Fatalf("nothing listens on the container's port 8081")
			}
			if conn, err := ocitest.DialIn(client.ns, "tcp", net.JoinHostPort(server.addr, "8081"), 300*time.Millisecond); err == nil {
				conn.Close()
				t.Errorf("the container's port 8081 takes a connection from outside")
			}
			if !testutil.Eventually(time.Minute, inside) {
				t.Errorf("the container's port 8081 from inside, after")
			}
		})
	}
}

// end is one side of a veth pair: its network namespace's path and its
// address.
type end struct{ ns, addr string }

// vethPair makes two network namespaces joined by a veth pair, 10.251.i.1
// (the client's) and 10.251.i.2 (the server's), removed at the test's end.
func vethPair(t *testing.T, i int) (client, server end) {
	t.Helper()
	id := fmt.Sprintf("%d-%d", os.Getpid(), i)
	client = end{"hutch-oci-c" + id, fmt.Sprintf("10.251.%d.1", i)}
	server = end{"hutch-oci-s" + id, fmt.Sprintf("10.251.%d.2", i)}
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v %s", strings.Join(args, " "), err, out)
		}
	}
	for _, e := range []end{client, server} {
		ip("netns", "add", e.ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", e.ns).Run() })
	}
	ip("-n", client.ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", server.ns)
	for _, e := range []end{client, server} {
		ip("-n", e.ns, "addr", "add", e.addr+"/24", "dev", "eth0")
		ip("-n", e.ns, "link", "set", "eth0", "up")
		ip("-n", e.ns, "link", "set", "lo", "up")
	}
	client.ns = "/var/run/netns/" + client.ns
	server.ns = "/var/run/netns/" + server.ns
	return client, server
}
