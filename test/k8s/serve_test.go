//go:build linux

package k8s

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/kube"
	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/k8stest"
	"github.com/hutch-sandbox/hutch/internal/testutil/ocitest"
)

// serveProc is a hutch serve --kubernetes the test started.
type serveProc struct {
	cmd    *exec.Cmd
	sock   string
	log    *testutil.Buffer
	exited chan struct{}
}

// startServe starts hutch serve on the cluster, with state in dir, and
// waits for it to listen on its socket.
func startServe(t *testing.T, c *k8stest.Cluster, dir string, flags ...string) *serveProc {
	t.Helper()
	p := &serveProc{sock: filepath.Join(dir, "s.sock"), log: &testutil.Buffer{}, exited: make(chan struct{})}
	args := append([]string{"serve", "--socket", p.sock, "--state-dir", filepath.Join(dir, "state"),
		"--kubernetes", "--kubeconfig", c.Kubeconfig, "--kubernetes-image", ocitest.TestImage,
		"--kubernetes-node-policy", "serve"}, flags...)
	p.cmd = exec.Command(testutil.Hutch(t), args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.Env = append(os.Environ(), "HOME="+dir)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.stop(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("hutch serve's log:\n%s", p.log.String())
		}
	})
	if !testutil.Eventually(2*time.Minute, func() bool {
		select {
		case <-p.exited:
			return true
		default:
		}
		return strings.Contains(p.log.String(), "hutch: listening on unix://"+p.sock+"\n")
	}) {
		t.Fatalf("hutch serve did not listen:\n%s", p.log.String())
	}
	select {
	case <-p.exited:
		t.Fatalf("hutch serve ended at start:\n%s", p.log.String())
	default:
	}
	return p
}

// stop ends the daemon with sig and waits for it.
func (p *serveProc) stop(sig syscall.Signal) {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(2 * time.Minute):
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// client is a client of the daemon's socket (its operator).
func (p *serveProc) client(t *testing.T) *client.Client {
	cl, err := client.New("unix://"+p.sock, "")
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// pods lists the names of hutch's pods, in every namespace.
func pods(t *testing.T, c *k8stest.Cluster) []string {
	return strings.Fields(c.Kubectl(t, "get", "pods", "-A", "-l", "app.kubernetes.io/managed-by=hutch", "-o", "jsonpath={.items[*].metadata.name}"))
}

// TestServeKubernetes: hutch serve --kubernetes runs each sandbox as a pod
// of the RuntimeClass hutch whose process is hutch's agent: a create
// starts the pod and answers once the agent does; commands and files go
// to the agent over the pod network; the pod runs confined by hutch-runc
// with the sandbox's allow-list added to the node policy; destroy deletes
// the pod and its Secret; what a pod cannot honour is refused by name; a
// daemon killed or stopped leaves its sandboxes running and the next one
// of its name takes them again; a sandbox of the tier gvisor is a pod of
// the RuntimeClass hutch-gvisor, on gVisor's kernel; with --warm, creates take pods the pool
// started (testServeWarm); two replicas on the node share the sandboxes
// (testServeReplicas), and so do the two of the Deployment of
// deploy/kubernetes/hutch-serve.yaml (testServeDeployment).
func TestServeKubernetes(t *testing.T) {
	// Beside TestServeKubernetesE2B, each on a cluster of its own: the
	// package's two longest.
	t.Parallel()
	c, port := hutchCluster(t, nil)
	c.KubectlIn(t, runtimeClassYAMLHutch, "apply", "-f", "-")
	c.NodeOnBridge(t)
	dir := t.TempDir()
	// As the manifest's service account, in its namespace.
	kc := serviceAccount(t, c)
	p := startServe(t, c, dir, "--kubeconfig", kc)
	cl := p.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	pol, _ := json.Marshal(map[string]any{"network": map[string]any{"allowed_domains": []string{fmt.Sprintf("upstream.test:%d", port)}}})
	sb, err := cl.Create(ctx, client.CreateOptions{Policy: pol})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if got := pods(t, c); len(got) != 1 || got[0] != "hutch-"+sb.ID {
		t.Errorf("pods %v, want hutch-%s", got, sb.ID)
	}
	r, err := cl.Run(ctx, sb.ID, client.Command{Args: []string{"sh", "-c", fmt.Sprintf(
		"echo out; echo err >&2; grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status; env | grep -c HUTCH_AGENT; fetch http://upstream.test:%d/; fetch http://127.0.0.2:%d/ && echo around; exit 3", port, port)}})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	out := string(r.Stdout)
	if r.ExitStatus.Code != 3 || !strings.Contains(out, "out\n") || !strings.Contains(string(r.Stderr), "err\n") {
		t.Errorf("run: exit %d, stdout %q, stderr %q", r.ExitStatus.Code, out, r.Stderr)
	}
	for _, want := range []string{"NoNewPrivs:\t1", "Seccomp:\t2", "\n0\n", "hello from the pod's upstream"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "around") {
		t.Errorf("a destination outside the allow-list was reached:\n%s", out)
	}
	// ESCAPES 25 and 27 on Kubernetes: a sandbox's code cannot read its
	// agent's secrets, nor reach another sandbox's agent, the kubelet
	// or the API server, directly or through the proxy; it has no
	// service account token.
	other, err := cl.Create(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	otherIP := strings.TrimSpace(c.Kubectl(t, "get", "pod", "hutch-"+other.ID, "-n", "hutch-sandboxes", "-o", "jsonpath={.status.podIP}"))
	agentAddr := fmt.Sprintf("%s:%d", otherIP, kube.DefaultAgentPort)
	r, err = cl.Run(ctx, sb.ID, client.Command{Args: []string{"sh", "-c", fmt.Sprintf(
		"attacker openproc:/proc/1/environ tcp:%[1]s tcp:%[2]s:10250 tcp:%[2]s:6443 open:/var/run/secrets/kubernetes.io/serviceaccount/token; fetch http://%[1]s/ || echo fetch refused",
		agentAddr, c.NodeIP)}})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	out = string(r.Stdout)
	t.Logf("from a sandbox:\n%s", out)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[1] == "ok" {
			t.Errorf("from a sandbox: %s", line)
		}
	}
	if !strings.Contains(out, "fetch refused") || strings.Count(out, "\n") < 6 {
		t.Errorf("from a sandbox:\n%s%s", out, r.Stderr)
	}
	if err := cl.Destroy(ctx, other.ID); err != nil {
		t.Fatal(err)
	}

	// The workspace is the pod's emptyDir, writable by the image's user.
	note := daemon.DefaultWorkspace + "/note.txt"
	if _, err := cl.WriteFile(ctx, sb.ID, note, strings.NewReader("kept in the pod\n"), 0o644); err != nil {
		t.Fatalf("write file: %v", err)
	}
	var b bytes.Buffer
	if _, err := cl.ReadFile(ctx, sb.ID, note, &b); err != nil || b.String() != "kept in the pod\n" {
		t.Errorf("read file: %q %v", b.String(), err)
	}
	r, err = cl.Run(ctx, sb.ID, client.Command{Args: []string{"sh", "-c", "pwd; cat note.txt; grep \" $(pwd) \" /proc/self/mountinfo | wc -l"}})
	if err != nil || string(r.Stdout) != daemon.DefaultWorkspace+"\nkept in the pod\n1\n" {
		t.Errorf("the workspace: %q %v", r.Stdout, err)
	}

	// The tier gvisor: a pod of the RuntimeClass hutch-gvisor, its agent
	// on gVisor's kernel; commands and files as under the tier namespace.
	begin := time.Now()
	gv, err := cl.Create(ctx, client.CreateOptions{Tier: "gvisor"})
	if err != nil {
		t.Fatalf("create of the tier gvisor: %v", err)
	}
	if class := c.Kubectl(t, "get", "pod", "hutch-"+gv.ID, "-n", "hutch-sandboxes", "-o", "jsonpath={.spec.runtimeClassName}"); class != gvisorHandler {
		t.Errorf("the sandbox of the tier gvisor is a pod of the RuntimeClass %q, want %s", class, gvisorHandler)
	}
	if _, err := cl.WriteFile(ctx, gv.ID, note, strings.NewReader("kept under gVisor\n"), 0o644); err != nil {
		t.Fatalf("write file under gVisor: %v", err)
	}
	r, err = cl.Run(ctx, gv.ID, client.Command{Args: []string{"sh", "-c", "dmesg | head -1; cat note.txt"}})
	if err != nil {
		t.Errorf("run under gVisor: %v", err)
	} else if !strings.Contains(string(r.Stdout), "gVisor") || !strings.Contains(string(r.Stdout), "kept under gVisor\n") {
		t.Errorf("run under gVisor: stdout %q, stderr %q", r.Stdout, r.Stderr)
	}
	if err := cl.Destroy(ctx, gv.ID); err != nil {
		t.Fatalf("destroy of the tier gvisor: %v", err)
	}
	t.Logf("a sandbox of the tier gvisor created, used and destroyed in %v", time.Since(begin).Round(time.Millisecond))

	// What a pod cannot honour is refused, saying what.
	for _, o := range []client.CreateOptions{
		{Policy: json.RawMessage(`{"network":{"allowed_cidrs":["10.0.0.0/8"]}}`)},
		{Policy: json.RawMessage(`{"secrets":[{"name":"K","from":"request","hosts":["upstream.test"]}]}`), Secrets: map[string]string{"K": "v"}},
	} {
		_, err := cl.Create(ctx, o)
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Code != client.CodeInvalid || !strings.Contains(ce.Message, "Kubernetes") {
			t.Errorf("create %s: %v, want invalid naming Kubernetes", o.Policy, err)
		}
	}
	if _, err := cl.Pause(ctx, sb.ID); err == nil || !strings.Contains(err.Error(), "Kubernetes") {
		t.Errorf("pause: %v, want a refusal naming Kubernetes", err)
	}

	if err := cl.Destroy(ctx, sb.ID); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if !testutil.Eventually(2*time.Minute, func() bool {
		return len(pods(t, c)) == 0 && !strings.Contains(c.Kubectl(t, "get", "secrets", "-n", "hutch-sandboxes", "-o", "name"), "hutch-"+sb.ID)
	}) {
		t.Errorf("left after destroy: pods %v, secrets %s", pods(t, c), c.Kubectl(t, "get", "secrets", "-n", "hutch-sandboxes", "-o", "name"))
	}

	// The sandboxes outlive the daemon: killed, or stopped (an upgrade),
	// the next one of its name takes them again — their agents, records
	// and timeouts. One whose pod went meanwhile is recorded as stopped.
	kept, err := cl.Create(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	gone, err := cl.Create(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := cl.WriteFile(ctx, kept.ID, note, strings.NewReader("before the restart\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, stop := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		p.stop(stop)
		if got := pods(t, c); len(got) != 2-i {
			t.Fatalf("pods after the daemon's %v: %v", stop, got)
		}
		if i == 0 {
			c.Kubectl(t, "delete", "pod", "hutch-"+gone.ID, "-n", "hutch-sandboxes", "--wait=true")
		}
		p = startServe(t, c, dir, "--kubeconfig", kc)
		cl = p.client(t)
		r, err := cl.Run(ctx, kept.ID, client.Command{Args: []string{"cat", note}})
		if err != nil || string(r.Stdout) != "before the restart\n" {
			t.Fatalf("after the daemon's %v: %q %v", stop, r.Stdout, err)
		}
		if !strings.Contains(p.log.String(), "sandbox taken again") {
			t.Errorf("the daemon does not say it took %s again:\n%s", kept.ID, p.log.String())
		}
	}
	if sb, err := cl.Get(ctx, gone.ID); err != nil || sb.State != "stopped" {
		t.Errorf("the sandbox whose pod went: %+v %v", sb, err)
	}
	if err := cl.Destroy(ctx, kept.ID); err != nil {
		t.Fatal(err)
	}
	if !testutil.Eventually(2*time.Minute, func() bool { return len(pods(t, c)) == 0 }) {
		t.Errorf("pods left: %v", pods(t, c))
	}

	t.Run("warm", func(t *testing.T) { testServeWarm(t, c) })
	t.Run("replicas", func(t *testing.T) { testServeReplicas(t, c, kc) })
	t.Run("deployment", func(t *testing.T) { testServeDeployment(t, c) })
}

// serviceAccount applies deploy/kubernetes/rbac.yaml (hutch serve's
// namespaces, service account and roles) and returns a kubeconfig of that
// service account's, with a token of its: hutch serve run with it has the
// manifest's permissions and no others.
func serviceAccount(t *testing.T, c *k8stest.Cluster) string {
	t.Helper()
	c.Kubectl(t, "apply", "-f", filepath.Join("..", "..", "deploy", "kubernetes", "rbac.yaml"))
	token := strings.TrimSpace(c.Kubectl(t, "create", "token", "hutch-serve", "-n", "hutch", "--duration=2h"))
	server := c.Kubectl(t, "config", "view", "--raw", "-o", "jsonpath={.clusters[0].cluster.server}")
	ca := c.Kubectl(t, "config", "view", "--raw", "-o", "jsonpath={.clusters[0].cluster.certificate-authority-data}")
	path := filepath.Join(t.TempDir(), "hutch-serve.kubeconfig")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %q, certificate-authority-data: %q}
users:
- name: hutch-serve
  user: {token: %q}
contexts:
- name: hutch-serve
  context: {cluster: test, user: hutch-serve, namespace: hutch-sandboxes}
current-context: hutch-serve
`, server, ca, token)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
