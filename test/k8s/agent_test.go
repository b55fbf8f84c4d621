//go:build linux

package k8s

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/k8stest"
	"github.com/hutch-sandbox/hutch/internal/testutil/ocitest"
)

// agentPort is the port of the agent's pod (dev.hutch.agent); otherPort
// one a process of the pod listens on, which the pod's firewall keeps
// closed.
const (
	agentPort = 7443
	otherPort = 8081
)

// agentPodYAML is a pod of the RuntimeClass hutch whose process is hutch's
// agent on agentPort (its image's command is replaced), with its token and
// TLS pair from the Secret agent-secrets, and the node's policy "pod".
var agentPodYAML = runtimeClassYAMLHutch + fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: agent
  annotations:
    dev.hutch.policy: pod
    dev.hutch.agent: "%d"
spec:
  runtimeClassName: hutch
  terminationGracePeriodSeconds: 5
  containers:
  - name: agent
    image: %s
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "echo the image's command ran; sleep 3600"]
    env:
    - name: HUTCH_AGENT_TOKEN
      valueFrom: {secretKeyRef: {name: agent-secrets, key: token}}
    - name: HUTCH_AGENT_TLS_CERT
      valueFrom: {secretKeyRef: {name: agent-secrets, key: tls.crt}}
    - name: HUTCH_AGENT_TLS_KEY
      valueFrom: {secretKeyRef: {name: agent-secrets, key: tls.key}}
`, agentPort, ocitest.TestImage)

// agentPod (TestHutchCluster/agent_pod): a pod of the RuntimeClass hutch with dev.hutch.agent runs
// hutch's agent as its process, which a client on the node reaches at the
// pod's address over TLS (the pod's certificate pinned) with the token
// from the pod's Secret: its commands run confined (no_new_privs, hutch's
// seccomp), get none of the agent's secrets in their environment, and
// cannot read them in the agent's (as root, as another user). A wrong
// token is refused, and so is a connection from the pod's own address;
// the pod's other ports take no connection from outside (kubectl
// port-forward, through the pod's loopback, still reaches them), and its
// egress still goes through the node policy's proxy alone.
func agentPod(t *testing.T, c *k8stest.Cluster, upstream int) {
	const token = "the-pod-agent-token-7f3a"
	pair := testutil.NewServerTLS(t, "agent.pod.test")
	secrets := t.TempDir()
	for name, b := range map[string][]byte{"token": []byte(token), "tls.crt": pair.CertPEM, "tls.key": pair.KeyPEM} {
		if err := os.WriteFile(filepath.Join(secrets, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	c.Kubectl(t, "create", "secret", "generic", "agent-secrets", "--from-file="+secrets)
	c.KubectlIn(t, agentPodYAML, "apply", "-f", "-")
	c.Kubectl(t, "wait", "--for=condition=Ready", "pod/agent", "--timeout=3m")
	podIP := strings.TrimSpace(c.Kubectl(t, "get", "pod", "agent", "-o", "jsonpath={.status.podIP}"))
	if _, err := netip.ParseAddr(podIP); err != nil {
		t.Fatalf("the pod's address %q: %v", podIP, err)
	}
	c.NodeOnBridge(t)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	addr := net.JoinHostPort(podIP, fmt.Sprint(agentPort))
	dial := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	pinned := &tls.Config{RootCAs: pair.Pool, ServerName: "agent.pod.test", MinVersion: tls.VersionTLS13}
	client := ocitest.WaitAgent(t, ctx, dial, token, pinned)
	run := func(user *agent.Credential, script string) (string, agent.ExitStatus) {
		t.Helper()
		return ocitest.AgentRun(t, ctx, client, user, script)
	}

	t.Run("commands", func(t *testing.T) {
		out, st := run(nil, "echo out; grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status; env; exit 3")
		if st.Code != 3 {
			t.Errorf("exit %+v, want code 3:\n%s", st, out)
		}
		for _, want := range []string{"out\n", "NoNewPrivs:\t1", "Seccomp:\t2", "HTTP_PROXY=http://127.0.0.1:"} {
			if !strings.Contains(out, want) {
				t.Errorf("no %q in:\n%s", want, out)
			}
		}
		if strings.Contains(out, "HUTCH_AGENT_") || strings.Contains(out, token) {
			t.Errorf("the agent's secrets in a command's environment:\n%s", out)
		}
		if logs := c.Kubectl(t, "logs", "agent"); strings.Contains(logs, "the image's command ran") {
			t.Errorf("the image's command ran:\n%s", logs)
		}
	})

	t.Run("secrets", func(t *testing.T) {
		// The agent's command line names nothing secret; its
		// environment is out of reach of the root of the container
		// (the agent is not dumpable) and of another user, and holds
		// the secrets no more anyway.
		script := "echo uid=$(busybox id -u); busybox cat /proc/1/cmdline | tr '\\0' ' '; echo; busybox cat /proc/1/environ; echo environ=$?"
		for _, user := range []*agent.Credential{nil, {UID: 1000, GID: 1000}} {
			out, _ := run(user, script)
			uid := uint32(0)
			if user != nil {
				uid = user.UID
			}
			if !strings.Contains(out, fmt.Sprintf("uid=%d\n", uid)) {
				t.Errorf("not run as uid %d:\n%s", uid, out)
			}
			if !strings.Contains(out, fmt.Sprintf("/dev/hutch agent --listen :%d", agentPort)) {
				t.Errorf("user %v: /proc/1/cmdline: %s", user, out)
			}
			if strings.Contains(out, token) || strings.Contains(out, "PRIVATE KEY") || !strings.Contains(out, "environ=1") {
				t.Errorf("user %v: the agent's environment is readable:\n%s", user, out)
			}
		}
		// The node's root reads the agent's environment: the
		// secrets are no longer in it.
		pids := agentPids(t)
		if len(pids) == 0 {
			t.Errorf("no process of the node runs the pod's agent")
		}
		for _, pid := range pids {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
			if err != nil {
				t.Errorf("the agent's environment: %v", err)
			} else if s := string(b); strings.Contains(s, token) || strings.Contains(s, "PRIVATE KEY") || strings.Contains(s, "CERTIFICATE") {
				t.Errorf("the agent's environment still holds its secrets: %q", s)
			}
		}
		// kubectl exec's processes do not get them from the pod's spec.
		r := c.Run(ctx, "", "exec", "agent", "--", "env")
		if r.Err != nil || !strings.Contains(r.Stdout, "PATH=") || strings.Contains(r.Stdout, "HUTCH_AGENT_") {
			t.Errorf("kubectl exec env: %s", r)
		}
	})

	t.Run("wrong token", func(t *testing.T) {
		cl, err := agent.DialListener(ctx, dial, "not-"+token, pinned)
		if err == nil {
			_, err = cl.Stat(ctx, "/")
			cl.Close()
		}
		if err == nil {
			t.Errorf("a wrong token is served")
		}
		// The agent still serves the client it has.
		if _, err := client.Stat(ctx, "/"); err != nil {
			t.Errorf("the client after a wrong token: %v", err)
		}
	})

	t.Run("own address", func(t *testing.T) {
		// A TLS client in the pod (without the proxy) to the agent at
		// the pod's address: the connection ends before the
		// handshake; from the node the same client gets the agent's
		// certificate, which it does not trust.
		out, _ := run(nil, fmt.Sprintf("HTTPS_PROXY= https_proxy= NO_PROXY='*' fetch https://%s/", addr))
		if !strings.Contains(out, "EOF") && !strings.Contains(out, "reset") || strings.Contains(out, "certificate") {
			t.Errorf("a connection from the pod's own address is not refused at once:\n%s", out)
		}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Minute}, "tcp", addr, &tls.Config{ServerName: "agent.pod.test"})
		if err == nil {
			conn.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("the agent's certificate from the node: %v", err)
		}
	})

	t.Run("inbound", func(t *testing.T) {
		p, err := client.Exec(ctx, agent.ExecRequest{Args: []string{"sh", "-c", fmt.Sprintf("while :; do echo hi from inside | nc -l -p %d; done", otherPort)}})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Signal(syscall.SIGKILL)
		go io.Copy(io.Discard, p.Stdout)
		go io.Copy(io.Discard, p.Stderr)
		listening := fmt.Sprintf("grep -qiE ':%04X [0-9A-F:]+ 0A ' /proc/net/tcp /proc/net/tcp6", otherPort)
		if !testutil.Eventually(time.Minute, func() bool { _, st := run(nil, listening); return st.Code == 0 }) {
			t.Fatalf("nothing listens on the pod's port %d", otherPort)
		}
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(podIP, fmt.Sprint(otherPort)), 300*time.Millisecond)
		if err == nil {
			conn.Close()
			t.Errorf("the pod's port %d takes a connection from the node", otherPort)
		}
		// kubectl port-forward reaches it: through the pod's loopback.
		pf := c.Command("port-forward", "pod/agent", fmt.Sprintf(":%d", otherPort))
		stdout, err := pf.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := pf.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { pf.Process.Kill(); pf.Wait() }()
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		var local int
		if _, err := fmt.Sscanf(line, "Forwarding from 127.0.0.1:%d", &local); err != nil {
			t.Fatalf("kubectl port-forward said %q", line)
		}
		conn, err = net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", local))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(time.Minute))
		if b, _ := io.ReadAll(conn); string(b) != "hi from inside\n" {
			t.Errorf("through kubectl port-forward: %q", b)
		}
	})

	t.Run("egress", func(t *testing.T) {
		out, _ := run(nil, fmt.Sprintf("fetch http://upstream.test:%d/; attacker tcp:127.0.0.2:%d tcp:%s", upstream, upstream, bridgeListener(t, c)))
		if !strings.Contains(out, "hello from the pod's upstream") {
			t.Errorf("no upstream through the proxy:\n%s", out)
		}
		noneAroundProxy(t, out)
	})

	client.Close()
	c.Kubectl(t, "delete", "pod", "agent", "--timeout=2m")
}

// agentPids are the node's pids of the processes that run hutch's agent
// on agentPort.
func agentPids(t *testing.T) []int {
	t.Helper()
	want := fmt.Sprintf("/dev/hutch\x00agent\x00--listen\x00:%d\x00", agentPort)
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var pids []int
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && string(b) == want {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			pids = append(pids, pid)
		}
	}
	return pids
}
