//go:build linux

package k8s

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil/k8stest"
)

// recorder is a runtime that keeps the spec of every container it creates
// in a directory (the first %s), then hands the call to runc (the second).
const recorder = `#!/bin/sh
prev=
for a; do
	if [ "$prev" = --bundle ] || [ "$prev" = -b ]; then cp "$a/config.json" "%s/$(basename "$a").json"; fi
	prev=$a
done
exec %s "$@"
`

const runtimeClassYAML = `apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: recorder
handler: recorder
---
apiVersion: v1
kind: Pod
metadata:
  name: recorded
  annotations:
    dev.hutch.test: "passed on"
    example.com/other: "kept back"
spec:
  runtimeClassName: recorder
  terminationGracePeriodSeconds: 5
  containers:
  - name: recorded
    image: ` + busyboxImage + `
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
`

// recorderHandler is the runtime handler "recorder" of a cluster, whose
// runtime keeps the spec of every container it creates in the directory
// it returns.
func recorderHandler(t *testing.T) (k8stest.RuntimeHandler, string) {
	specs := t.TempDir()
	runtime := filepath.Join(t.TempDir(), "recorder")
	script := []byte(strings.Replace(strings.Replace(recorder, "%s", specs, 1), "%s", k8stest.Runc(k8stest.BinDir(t)), 1))
	if err := os.WriteFile(runtime, script, 0o755); err != nil {
		t.Fatal(err)
	}
	return k8stest.RuntimeHandler{Name: "recorder", BinaryName: runtime, PodAnnotations: []string{"dev.hutch.*"}}, specs
}

// runtimeHandler (TestHutchCluster/runtime_handler) runs a pod of a
// RuntimeClass whose handler is a runtime handler added to the cluster
// (recorderHandler, as hutch's are), and checks that its containers were
// created by that handler's runtime with the pod's annotations that match
// the handler's pod_annotations, and no others. The pod is left running:
// the cluster's teardown must end it (TestHutchCluster checks it leaves
// nothing behind).
func runtimeHandler(t *testing.T, c *k8stest.Cluster, specs string) {
	c.KubectlIn(t, runtimeClassYAML, "apply", "-f", "-")
	c.Kubectl(t, "wait", "--for=condition=Ready", "pod/recorded", "--timeout=3m")

	entries, err := os.ReadDir(specs)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Fatalf("the handler's runtime created %d containers, want 2 (the sandbox and the pod's container)", len(entries))
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(specs, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var spec struct{ Annotations map[string]string }
		if err := json.Unmarshal(b, &spec); err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		if got := spec.Annotations["dev.hutch.test"]; got != "passed on" {
			t.Errorf("%s: annotation dev.hutch.test = %q, want the pod's", e.Name(), got)
		}
		if got, ok := spec.Annotations["example.com/other"]; ok {
			t.Errorf("%s: annotation example.com/other = %q, want none (not in pod_annotations)", e.Name(), got)
		}
	}
}

// clusterLeftNothing checks that the ended cluster c left nothing behind:
// no directory, bridge, cgroup or process.
func clusterLeftNothing(t *testing.T, c *k8stest.Cluster) {
	t.Helper()
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Errorf("the cluster's directory %s is left: %v", c.Dir, err)
	}
	if _, err := os.Stat("/sys/class/net/" + c.Bridge); !os.IsNotExist(err) {
		t.Errorf("the pods' bridge %s is left: %v", c.Bridge, err)
	}
	if left, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", c.CgroupRoot)); len(left) > 0 {
		t.Errorf("the pods' cgroups are left: %v", left)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), c.Dir) {
			t.Errorf("a process of the cluster is left: %s: %q", p, b)
		}
	}
}
