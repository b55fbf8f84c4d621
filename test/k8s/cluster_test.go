//go:build linux

package k8s

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/k8stest"
)

// busyboxImage is the tag the test's busybox image is imported as.
const busyboxImage = "hutch.local/k8stest/busybox:1"

const podYAML = `apiVersion: v1
kind: Pod
metadata:
  name: hello
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: hello
    image: ` + busyboxImage + `
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "echo hello from the pod; mkdir /tmp/www; echo served in the pod > /tmp/www/index.html; httpd -p 127.0.0.1:8080 -h /tmp/www; trap 'exit 0' TERM; while :; do sleep 1; done"]
`

// busyboxTar is the tests' busybox image (sleep and httpd linked) as a
// tarball to import into a cluster as busyboxImage.
func busyboxTar(t *testing.T) string {
	need := func(ok bool, reason string) { t.Helper(); testutil.Need(t, ok, reason) }
	img := imagetest.BusyboxWith(t, need, nil, imagetest.Symlink("bin/sleep", "busybox"), imagetest.Symlink("bin/httpd", "busybox"))
	return imagetest.DockerSave(t, img, busyboxImage, t.TempDir())
}

// runcPod (TestHutchCluster/runc_pod) runs a busybox pod with the default
// runtime handler (runc), and checks that it becomes Ready, that kubectl
// logs, exec and port-forward (to a server on the pod's loopback) reach it
// through the API server and the kubelet, and that deleting it removes it.
func runcPod(t *testing.T, c *k8stest.Cluster) {
	begin := time.Now()
	c.KubectlIn(t, podYAML, "apply", "-f", "-")
	c.Kubectl(t, "wait", "--for=condition=Ready", "pod/hello", "--timeout=3m")
	t.Logf("pod Ready %v after it was created", time.Since(begin).Round(time.Millisecond))

	if got := c.Kubectl(t, "get", "pod", "hello", "-o", "jsonpath={.spec.nodeName}"); got != c.NodeName {
		t.Errorf("pod is on node %q, want %q", got, c.NodeName)
	}
	if got := c.Kubectl(t, "logs", "hello"); got != "hello from the pod\n" {
		t.Errorf("kubectl logs = %q, want %q", got, "hello from the pod\n")
	}
	if got := c.Kubectl(t, "exec", "hello", "--", "cat", "/etc/motd"); got != "from the image\n" {
		t.Errorf("kubectl exec cat /etc/motd = %q, want the image's", got)
	}
	if got := c.KubectlIn(t, "echo $GREETING; exit\n", "exec", "-i", "hello", "--", "/bin/sh"); got != "hi from the image\n" {
		t.Errorf("kubectl exec -i sh = %q, want the image's GREETING", got)
	}

	if got := portForwardGet(t, c, "pod/hello", 8080, "/index.html"); got != "served in the pod\n" {
		t.Errorf("GET through kubectl port-forward = %q, want the pod's file", got)
	}

	begin = time.Now()
	c.Kubectl(t, "delete", "pod", "hello", "--timeout=2m")
	t.Logf("pod deleted in %v", time.Since(begin).Round(time.Millisecond))
	if got := c.Kubectl(t, "get", "pods", "hello", "-o", "name", "--ignore-not-found"); strings.TrimSpace(got) != "" {
		t.Errorf("the pod is left after the delete: %q", got)
	}
}

// portForwardGet runs kubectl port-forward from a free port of 127.0.0.1 to
// port of target, GETs path through it and returns the body.
func portForwardGet(t *testing.T, c *k8stest.Cluster, target string, port int, path string) string {
	t.Helper()
	cmd := c.Command("port-forward", "--address=127.0.0.1", target, fmt.Sprintf(":%d", port))
	var stderr testutil.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	// "Forwarding from 127.0.0.1:PORT -> 8080"
	line, err := bufio.NewReader(out).ReadString('\n')
	var local int
	if _, perr := fmt.Sscanf(line, "Forwarding from 127.0.0.1:%d ->", &local); err != nil || perr != nil {
		t.Fatalf("kubectl port-forward printed %q (%v), stderr:\n%s", line, err, stderr.String())
	}
	go io.Copy(io.Discard, out)
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", local, path))
	if err != nil {
		t.Fatalf("GET through kubectl port-forward: %v\n%s", err, stderr.String())
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
