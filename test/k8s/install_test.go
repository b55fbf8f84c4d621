//go:build linux

package k8s

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/k8stest"
	"github.com/hutch-sandbox/hutch/internal/testutil/ocitest"
)

// installerImage is the tag the installer's image (busybox and a static
// hutch-runc) is imported as.
const installerImage = "hutch.local/k8stest/hutch-runc:1"

// installerManifest is deploy/kubernetes/hutch-runc.yaml with the image
// set, the node's root (hostPath /) at host and no --restart-containerd:
// the test's cluster is not the machine's, and nothing of the machine's
// is touched.
func installerManifest(t *testing.T, host string) string {
	t.Helper()
	return manifest(t, "hutch-runc.yaml",
		edit{"image: REGISTRY/hutch-runc:VERSION\n", "image: " + installerImage + "\n        imagePullPolicy: Never\n"},
		edit{"          path: /\n", "          path: " + host + "\n"},
		edit{"        - --restart-containerd\n", ""})
}

// edit replaces old, which a manifest must hold once, with new.
type edit struct{ old, new string }

// manifest is deploy/kubernetes/NAME with edits made.
func manifest(t *testing.T, name string, edits ...edit) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubernetes", name))
	if err != nil {
		t.Fatal(err)
	}
	m := string(b)
	for _, e := range edits {
		if strings.Count(m, e.old) != 1 {
			t.Fatalf("deploy/kubernetes/%s has not one %q", name, e.old)
		}
		m = strings.Replace(m, e.old, e.new, 1)
	}
	return m
}

// testRuntimeInstaller (TestHutchCluster/installer) applies the DaemonSet of
// deploy/kubernetes/hutch-runc.yaml, its hostPath a directory of the test
// standing for the node's root: its pod installs hutch-runc and containerd
// 2's runtime handler hutch there and becomes Ready by its probe
// (hutch-runc check --host, which runs the node's runc, chrooted, and
// checks the installation); containerd 2 loads the drop-in through the
// node's imports; a new pod changes nothing; uninstall takes it off.
func testRuntimeInstaller(t *testing.T, c *k8stest.Cluster) {
	need := func(ok bool, reason string) { t.Helper(); testutil.Need(t, ok, reason) }
	bin := k8stest.BinDir(t)
	self, err := os.ReadFile(ocitest.HutchRunc(t))
	if err != nil {
		t.Fatal(err)
	}
	img := imagetest.BusyboxWith(t, need, nil, imagetest.File("usr/local/bin/hutch-runc", string(self), 0o755))
	tar := imagetest.DockerSave(t, img, installerImage, t.TempDir())

	// The node's root: its runc (the cluster's, static), its /tmp and
	// /run (check's idmapped mounts), and a containerd configuration that
	// imports the drop-ins (relative to it: they are under this
	// directory, not the machine's /etc).
	host := t.TempDir()
	for _, d := range []string{"usr/local/sbin", "tmp", "run", "etc/containerd"} {
		if err := os.MkdirAll(filepath.Join(host, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	runc, err := os.ReadFile(k8stest.Runc(bin))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "usr/local/sbin/runc"), runc, 0o755); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(host, "etc/containerd/config.toml")
	if err := os.WriteFile(config, []byte("version = 3\nimports = [\"conf.d/*.toml\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	c.Import(t, tar)
	c.KubectlIn(t, installerManifest(t, host), "apply", "-f", "-")
	const pods = "app.kubernetes.io/name=hutch-runc"
	waitReady := func() {
		t.Helper()
		c.Kubectl(t, "-n", "kube-system", "rollout", "status", "daemonset/hutch-runc", "--timeout=3m")
		c.Kubectl(t, "-n", "kube-system", "wait", "--for=condition=Ready", "pod", "-l", pods, "--timeout=3m")
	}
	waitReady()

	installed := filepath.Join(host, "usr/local/bin/hutch-runc")
	fi, err := os.Stat(installed)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o755 {
		t.Errorf("%s: mode %v, want 0755", installed, fi.Mode())
	}
	if b, _ := os.ReadFile(installed); !bytes.Equal(b, self) {
		t.Errorf("%s is not the image's hutch-runc", installed)
	}
	dropIn := filepath.Join(host, "etc/containerd/conf.d/hutch.toml")
	b, err := os.ReadFile(dropIn)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`[plugins."io.containerd.cri.v1.runtime".containerd.runtimes."hutch"]`, `pod_annotations = ["dev.hutch.*"]`, `BinaryName = "/usr/local/bin/hutch-runc"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s: no %q in:\n%s", dropIn, want, b)
		}
	}
	logs := c.Kubectl(t, "-n", "kube-system", "logs", "-l", pods)
	for _, want := range []string{"hutch-runc: installed", "wrote the runtime handler", "containerd must be restarted", "waiting for SIGTERM"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the installer's log has no %q:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, "warning") {
		t.Errorf("the installer warns, the node's containerd imports its drop-in:\n%s", logs)
	}

	// containerd 2 reads the node's configuration with the drop-in.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "containerd"), "--config", config, "config", "dump").CombinedOutput()
	if err != nil {
		t.Fatalf("containerd config dump: %v\n%s", err, out)
	}
	for _, want := range []string{"containerd.runtimes.hutch.options]", "BinaryName = '/usr/local/bin/hutch-runc'", "pod_annotations = ['dev.hutch.*']"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("containerd's configuration with the drop-in has no %q:\n%s", want, out)
		}
	}

	// A new pod (a node's reboot, the DaemonSet's update) changes
	// nothing, and is Ready.
	before := fi.ModTime()
	c.Kubectl(t, "-n", "kube-system", "delete", "pod", "-l", pods, "--timeout=2m")
	waitReady()
	if logs := c.Kubectl(t, "-n", "kube-system", "logs", "-l", pods); !strings.Contains(logs, "nothing changed") {
		t.Errorf("the second installer's log:\n%s", logs)
	}
	if fi, err := os.Stat(installed); err != nil || !fi.ModTime().Equal(before) {
		t.Errorf("the second installer rewrote %s: %v", installed, err)
	}

	// Uninstall, from the DaemonSet's pod, takes it off the node.
	r := c.Run(ctx, "", "-n", "kube-system", "exec", "daemonset/hutch-runc", "--", "/usr/local/bin/hutch-runc", "uninstall", "--host=/host")
	if r.Err != nil {
		t.Fatalf("uninstall: %s", r)
	}
	for _, p := range []string{installed, dropIn} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s after uninstall: %v", p, err)
		}
	}
	c.Kubectl(t, "-n", "kube-system", "delete", "daemonset", "hutch-runc", "--timeout=2m")
}
