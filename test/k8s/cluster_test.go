//go:build linux

package k8s

import (
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
    command: ["/bin/sh", "-c", "echo hello from the pod; trap 'exit 0' TERM; while :; do sleep 1; done"]
`

// TestClusterRunsAPod starts a cluster, runs a busybox pod with the default
// runtime handler (runc), and checks that it becomes Ready, that kubectl
// logs and exec reach it through the API server and the kubelet, and that
// deleting it removes it.
func TestClusterRunsAPod(t *testing.T) {
	need := func(ok bool, reason string) { t.Helper(); testutil.Need(t, ok, reason) }
	k8stest.BinDir(t)
	img := imagetest.BusyboxWith(t, need, nil, imagetest.Symlink("bin/sleep", "busybox"))
	tar := imagetest.DockerSave(t, img, busyboxImage, t.TempDir())

	begin := time.Now()
	c := k8stest.StartCluster(t, k8stest.Options{Images: []string{tar}})
	t.Logf("cluster started in %v", time.Since(begin).Round(time.Millisecond))

	begin = time.Now()
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

	begin = time.Now()
	c.Kubectl(t, "delete", "pod", "hello", "--timeout=2m")
	t.Logf("pod deleted in %v", time.Since(begin).Round(time.Millisecond))
	if got := c.Kubectl(t, "get", "pods", "-o", "name"); strings.TrimSpace(got) != "" {
		t.Errorf("pods left after the delete: %q", got)
	}
}
