//go:build linux

package k8s

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
	"github.com/hutch-sandbox/hutch/internal/kube"
	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/k8stest"
	"github.com/hutch-sandbox/hutch/internal/testutil/ocitest"
)

// serveImage is the tag the image of hutch serve (busybox and a static
// hutch-serve, its entrypoint) is imported as.
const serveImage = "hutch.local/k8stest/hutch-serve:1"

// deployName is the Deployment's --kubernetes-name: not the name of the
// hutch serve TestServeKubernetes runs on the node meanwhile.
const deployName = "deploy"

// serveManifest is deploy/kubernetes/hutch-serve.yaml with what a user
// sets set: the image (imported, not pulled), the sandboxes' image, the
// daemon's name; and the address of the API server in the test's
// cluster, relay (k8stest's APIServerOnBridge).
func serveManifest(t *testing.T, relay string) string {
	t.Helper()
	host, port, _ := strings.Cut(relay, ":")
	return manifest(t, "hutch-serve.yaml",
		edit{"image: REGISTRY/hutch-serve:VERSION\n", "image: " + serveImage + "\n        imagePullPolicy: Never\n"},
		edit{"- --kubernetes-image=REGISTRY/sandbox-base:VERSION\n", "- --kubernetes-image=" + ocitest.TestImage + "\n        - --kubernetes-name=" + deployName + "\n"},
		// The API server of the test's cluster is on the node's
		// loopback, and no kube-proxy routes the Service kubernetes:
		// the pods reach it at a relay on the node's address on their
		// bridge instead, which client-go's in-cluster configuration
		// takes from these two (set by the kubelet from that Service
		// otherwise).
		edit{"        env:\n", fmt.Sprintf("        env:\n        - {name: KUBERNETES_SERVICE_HOST, value: %q}\n        - {name: KUBERNETES_SERVICE_PORT, value: %q}\n", host, port)})
}

// servePods are the names and addresses of the Deployment's pods that
// run, by name.
func servePods(t *testing.T, c *k8stest.Cluster) map[string]string {
	t.Helper()
	out := c.Kubectl(t, "-n", "hutch", "get", "pods", "-l", "app=hutch-serve", "--field-selector=status.phase=Running",
		"-o", `jsonpath={range .items[*]}{.metadata.name} {.status.podIP}{"\n"}{end}`)
	pods := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			pods[f[0]] = f[1]
		}
	}
	return pods
}

// testServeDeployment (on TestServeKubernetes's cluster, after rbac.yaml
// is applied) runs hutch serve as the Deployment of
// deploy/kubernetes/hutch-serve.yaml, its image busybox with a static
// hutch-serve as its entrypoint: both replicas become Ready with the
// manifest's args, in-cluster configuration (the service account's token
// and CA) and probe; `hutch-serve token create` through kubectl exec makes
// a token; a sandbox made through one replica's pod answers through the
// other's, sent on between the pods at their advertised addresses; the
// first pod deleted (SIGTERM: its Lease goes with it), the other takes the
// sandbox over at once; the Deployment deleted leaves no pod nor Lease.
func testServeDeployment(t *testing.T, c *k8stest.Cluster) {
	begin := time.Now()
	need := func(ok bool, reason string) { t.Helper(); testutil.Need(t, ok, reason) }
	self, err := os.ReadFile(filepath.Join(filepath.Dir(testutil.Hutch(t)), "hutch-serve"))
	if err != nil {
		t.Fatal(err)
	}
	img := imagetest.BusyboxWith(t, need, func(cf *v1.Config) {
		cf.Env = []string{"PATH=/usr/local/bin:/bin"}
		cf.Entrypoint, cf.Cmd = []string{"/usr/local/bin/hutch-serve"}, nil
	}, imagetest.File("usr/local/bin/hutch-serve", string(self), 0o755))
	c.Import(t, imagetest.DockerSave(t, img, serveImage, t.TempDir()))
	relay := c.APIServerOnBridge(t)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Cleanups run last first: the Deployment goes before the relay.
	t.Cleanup(func() {
		if t.Failed() {
			r := c.Run(ctx, "", "-n", "hutch", "logs", "-l", "app=hutch-serve", "--prefix", "--tail=200")
			t.Logf("hutch serve's pods' logs:\n%s%s", r.Stdout, r.Stderr)
		}
		c.Run(ctx, "", "-n", "hutch", "delete", "deployment,service", "hutch-serve", "--ignore-not-found", "--wait=true")
		c.Run(ctx, "", "-n", "hutch", "wait", "--for=delete", "pod", "-l", "app=hutch-serve", "--timeout=2m")
		// What hutch serve of deployName keeps: its tokens, its key,
		// its records.
		c.Run(ctx, "", "-n", "hutch-sandboxes", "delete", "secrets,configmaps,leases,pods", "-l", kube.LabelDaemon+"="+deployName)
	})
	c.KubectlIn(t, serveManifest(t, relay.String()), "apply", "-f", "-")
	c.Kubectl(t, "-n", "hutch", "rollout", "status", "deployment/hutch-serve", "--timeout=3m")
	pods := servePods(t, c)
	if len(pods) != 2 {
		t.Fatalf("the Deployment's running pods: %v, want 2", pods)
	}
	var names []string
	for n := range pods {
		names = append(names, n)
	}
	a, b := names[0], names[1]
	t.Logf("replicas Ready in %v (%s at %s, %s at %s)", time.Since(begin).Round(time.Millisecond), a, pods[a], b, pods[b])
	logs := map[string]*testutil.Buffer{a: followLogs(t, c, a), b: followLogs(t, c, b)}
	t.Cleanup(func() {
		if t.Failed() {
			for n, l := range logs {
				t.Logf("%s's log:\n%s", n, l.String())
			}
		}
	})

	// A token, as a user makes one: on a replica's unix socket (its
	// operator), through kubectl exec.
	r := c.Run(ctx, "", "-n", "hutch", "exec", a, "--", "hutch-serve", "token", "create", "--tenant", "t")
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	token := lines[len(lines)-1]
	if r.Err != nil || len(lines) != 2 || strings.ContainsAny(token, " \t") {
		t.Fatalf("hutch-serve token create through kubectl exec: %s", r)
	}
	clientOf := func(pod string) *client.Client {
		cl, err := client.New("http://"+pods[pod]+":8080", token)
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	ca, cb := clientOf(a), clientOf(b)

	sb, err := ca.Create(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatalf("create through %s: %v", a, err)
	}
	res, err := ca.Run(ctx, sb.ID, client.Command{Args: []string{"sh", "-c", "echo made by A > note.txt; cat note.txt"}})
	if err != nil || string(res.Stdout) != "made by A\n" {
		t.Fatalf("run through %s: %+v %v", a, res, err)
	}
	// Through B: sent on to A, at the address A advertises.
	res, err = cb.Run(ctx, sb.ID, client.Command{Args: []string{"sh", "-c", "echo through B; exit 5"}})
	if err != nil || res.ExitStatus.Code != 5 || string(res.Stdout) != "through B\n" {
		t.Errorf("run through %s: %+v %v", b, res, err)
	}
	note := daemon.DefaultWorkspace + "/note.txt"
	var buf bytes.Buffer
	if _, err := cb.ReadFile(ctx, sb.ID, note, &buf); err != nil || buf.String() != "made by A\n" {
		t.Errorf("read file through %s: %q %v", b, buf.String(), err)
	}

	// A's pod deleted: hutch serve's SIGTERM deletes its Lease, and
	// the sandbox is taken over at once, by B (a request for it) or by
	// the pod the Deployment starts in A's place (its look for sandboxes
	// of replicas gone), whichever is first. Through B it answers.
	c.Kubectl(t, "-n", "hutch", "delete", "pod", a, "--wait=true", "--timeout=2m")
	res, err = cb.Run(ctx, sb.ID, client.Command{Args: []string{"cat", "note.txt"}})
	if err != nil || string(res.Stdout) != "made by A\n" {
		t.Errorf("run through %s after %s's deletion: %+v %v", b, a, res, err)
	}
	c.Kubectl(t, "-n", "hutch", "rollout", "status", "deployment/hutch-serve", "--timeout=3m")
	var a2 string
	for n := range servePods(t, c) {
		if logs[n] == nil {
			a2, logs[n] = n, followLogs(t, c, n)
		}
	}
	if a2 == "" {
		t.Fatalf("no pod in %s's place: %v", a, servePods(t, c))
	}
	var rec struct{ Owner string }
	if err := json.Unmarshal([]byte(c.Kubectl(t, "-n", "hutch-sandboxes", "get", "configmap", "hutch-rec-"+sb.ID, "-o", "jsonpath={.data.record}")), &rec); err != nil {
		t.Fatal(err)
	}
	if took := logs[rec.Owner]; rec.Owner == a || took == nil || !testutil.Eventually(time.Minute, func() bool {
		return strings.Contains(took.String(), `msg="sandbox taken over from a replica gone" sandbox=`+sb.ID)
	}) {
		t.Errorf("%s after %s's deletion is %q's, which does not say it took it over", sb.ID, a, rec.Owner)
	}
	t.Logf("%s taken over by %s", sb.ID, rec.Owner)
	// The pod started in A's place is a replica like the others.
	pods[a2] = servePods(t, c)[a2]
	if res, err := clientOf(a2).Run(ctx, sb.ID, client.Command{Args: []string{"cat", "note.txt"}}); err != nil || string(res.Stdout) != "made by A\n" {
		t.Errorf("run through %s: %+v %v", a2, res, err)
	}
	if err := cb.Destroy(ctx, sb.ID); err != nil {
		t.Errorf("destroy through %s: %v", b, err)
	}

	// The Deployment goes once the new pod's hutch serve renewed its
	// Lease: a pod deleted within a second or two of its start was seen
	// (about one run in three) to lose its way to the API server before
	// its hutch serve ended, which then could not delete its Lease (it
	// says so, "hutch: close": the Lease lapses instead).
	lease := "hutch-" + deployName + "-" + a2
	if !testutil.Eventually(time.Minute, func() bool {
		f := strings.Fields(c.Kubectl(t, "-n", "hutch-sandboxes", "get", "lease", lease, "-o", "jsonpath={.spec.acquireTime} {.spec.renewTime}"))
		return len(f) == 2 && f[0] != f[1]
	}) {
		t.Errorf("%s's Lease %s was not renewed", a2, lease)
	}

	c.Kubectl(t, "-n", "hutch", "delete", "deployment,service", "hutch-serve", "--wait=true", "--timeout=2m")
	c.Kubectl(t, "-n", "hutch", "wait", "--for=delete", "pod", "-l", "app=hutch-serve", "--timeout=2m")
	left := func() string {
		return c.Kubectl(t, "get", "pods,leases", "-A", "-l", kube.LabelDaemon+"="+deployName, "-o", "name") +
			c.Kubectl(t, "get", "pods", "-n", "hutch", "-o", "name") +
			c.Kubectl(t, "get", "secret", "-n", "hutch-sandboxes", "--ignore-not-found", "-o", "name", "hutch-"+sb.ID)
	}
	if !testutil.Eventually(time.Minute, func() bool { return left() == "" }) {
		t.Errorf("left after the Deployment's deletion:\n%s", left())
	}
	t.Logf("the Deployment's test: %v", time.Since(begin).Round(time.Millisecond))
}

// followLogs follows the log of the hutch serve of pod into the buffer it
// returns until the pod's container ends or the test does.
func followLogs(t *testing.T, c *k8stest.Cluster, pod string) *testutil.Buffer {
	t.Helper()
	var buf testutil.Buffer
	cmd := c.Command("-n", "hutch", "logs", "-f", pod)
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	return &buf
}
