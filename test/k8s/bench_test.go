//go:build linux

package k8s

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/kube"
	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/ocitest"
)

// Environment of TestBenchKubernetes (bench/k8s.sh sets it).
const (
	benchEnv         = "HUTCH_BENCH_K8S"      // 1 runs it
	benchSamplesEnv  = "HUTCH_BENCH_N"        // samples per measure (default 10)
	benchClaimsEnv   = "HUTCH_BENCH_K"        // concurrent claims (default 8)
	benchMarkdownEnv = "HUTCH_BENCH_MARKDOWN" // 1: markdown tables
	benchOutEnv      = "HUTCH_BENCH_OUT"      // the file the tables go to (default: stdout)
)

// benchEnvInt is the positive number of the environment variable name,
// def when unset.
func benchEnvInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

// TestBenchKubernetes measures, on one cluster, what a sandbox of hutch
// serve --kubernetes costs against the cluster's own pods, interleaved
// sample by sample:
//
//   - floor runc: a pod of the default runtime handler (runc), the test
//     image running `echo ready; exec sleep`: API create → Running (a
//     watch), and → its first line read through the pod's log (follow,
//     opened once Running);
//   - floor hutch-runc: the same pod of RuntimeClass hutch (hutch-runc,
//     the node policy serve, no agent);
//   - hutch cold: client.Create → first output of client.Run("echo")
//     on a hutch serve --kubernetes without a pool;
//   - hutch warm: the same on one with --warm 2, the pool full before
//     each sample;
//
// then K concurrent creates from a full pool of K (claims/s, p50/p99 of
// a claim: create → its echo's output), and the round trip of a command
// on a running sandbox: client.Run("true") against `kubectl exec POD --
// true` on the same pod (and `kubectl get pod`, the cost of a kubectl
// process and an API request). It prints p50/p90 and ratios to the floors. It
// runs only with HUTCH_BENCH_K8S=1 (bench/k8s.sh).
func TestBenchKubernetes(t *testing.T) {
	if os.Getenv(benchEnv) != "1" {
		t.Skip("a benchmark: runs with " + benchEnv + "=1 (bench/k8s.sh)")
	}
	n, k := benchEnvInt(t, benchSamplesEnv, 10), benchEnvInt(t, benchClaimsEnv, 8)
	// SIGINT or SIGTERM (bench/k8s.sh's stop) ends the run through the
	// test's failure, so that its cleanups stop the cluster.
	sig, stopSig := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSig()
	c, _ := hutchCluster(t, nil)
	c.KubectlIn(t, runtimeClassYAMLHutch, "apply", "-f", "-")
	c.NodeOnBridge(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	api := podsClient(t, cfg)

	cold := startServe(t, c, t.TempDir(), "--kubernetes-name", "cold")
	const warmSize = 2
	warmP := startServe(t, c, t.TempDir(), "--warm", strconv.Itoa(warmSize), "--kubernetes-name", "warm")
	claimP := startServe(t, c, t.TempDir(), "--warm", strconv.Itoa(k), "--kubernetes-name", "claims")
	coldC, warmC, claimC := cold.client(t), warmP.client(t), claimP.client(t)
	ctx, cancel := context.WithTimeout(sig, 30*time.Minute)
	defer cancel()
	// until waits for cond, or fails the test with what after 5 minutes
	// or once ctx ended.
	until := func(cond func() bool, what func() string) {
		t.Helper()
		if !testutil.Eventually(5*time.Minute, func() bool { return ctx.Err() != nil || cond() }) || ctx.Err() != nil {
			t.Fatalf("%s (%v)", what(), ctx.Err())
		}
	}

	// settle waits for p's pool to have made want warm sandboxes in
	// all, then a moment for their starts' last steps.
	settle := func(p *serveProc, want int) {
		t.Helper()
		until(func() bool { return p.warmReady() >= want },
			func() string { return fmt.Sprintf("the pool did not fill to %d: %d ready", want, p.warmReady()) })
	}
	warmMade, claimMade := warmSize, k
	settle(warmP, warmMade)
	settle(claimP, claimMade)

	// floor starts the floor pod name of RuntimeClass class ("" for the
	// default handler) and returns the times to Running and to its
	// first line; the pod is deleted.
	floor := func(name, class string) (running, output time.Duration) {
		t.Helper()
		w, err := api.watch(ctx, fields.OneTermEqualSelector("metadata.name", name).String())
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		start := time.Now()
		if err := api.create(ctx, floorPod(name, class)); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := api.delete(name); err != nil {
				t.Error(err)
			}
		}()
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				t.Fatalf("watch of %s: %v", name, ev.Object)
			}
			if p, ok := ev.Object.(*corev1.Pod); ok && p.Status.Phase == corev1.PodRunning {
				running = time.Since(start)
				break
			} else if ok && p.Status.Phase != corev1.PodPending {
				t.Fatalf("pod %s: %s", name, p.Status.Phase)
			}
		}
		if running == 0 {
			t.Fatalf("the watch of %s ended before it ran", name)
		}
		logs, err := api.follow(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		defer logs.Close()
		line, err := bufio.NewReader(logs).ReadString('\n')
		if err != nil || line != "ready\n" {
			t.Fatalf("the log of %s: %q %v", name, line, err)
		}
		return running, time.Since(start)
	}
	// sandbox creates a sandbox with cl and returns the time to its
	// echo's output; the sandbox is destroyed.
	sandbox := func(cl *client.Client) time.Duration {
		t.Helper()
		start := time.Now()
		sb, err := cl.Create(ctx, client.CreateOptions{})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		defer cl.Destroy(context.Background(), sb.ID)
		r, err := cl.Run(ctx, sb.ID, client.Command{Args: []string{"echo", "ready"}})
		if err != nil || string(r.Stdout) != "ready\n" {
			t.Fatalf("run: %q %v", r.Stdout, err)
		}
		return time.Since(start)
	}
	// gone waits for the pods of the daemons' deleted sandboxes and of
	// the floors to be deleted, so that a sample starts on a quiet node.
	gone := func() {
		t.Helper()
		until(func() bool {
			n, err := api.count(ctx)
			return err == nil && n == warmSize+k
		}, func() string { return fmt.Sprintf("pods left after a sample: %v", pods(t, c)) })
	}

	times := map[string][]time.Duration{}
	log := func(name string, d time.Duration) { times[name] = append(times[name], d) }
	for i := -1; i < n; i++ { // the first round is not timed
		keep := func(name string, d time.Duration) {
			if i >= 0 {
				log(name, d)
			}
		}
		r, o := floor(fmt.Sprintf("floor-runc-%d", i+1), "")
		keep("floor runc: Running", r)
		keep("floor runc: first output", o)
		gone()
		r, o = floor(fmt.Sprintf("floor-hutch-%d", i+1), "hutch")
		keep("floor hutch-runc: Running", r)
		keep("floor hutch-runc: first output", o)
		gone()
		keep("hutch cold", sandbox(coldC))
		gone()
		keep("hutch warm", sandbox(warmC))
		warmMade++
		settle(warmP, warmMade)
		gone()
	}

	// Claims: K creates at once from a full pool of K, each followed
	// by its echo.
	var claims []time.Duration
	var walls []time.Duration
	rounds := max(1, n/5)
	for range rounds {
		var mu sync.Mutex
		var wg sync.WaitGroup
		ids := make([]string, 0, k)
		start := time.Now()
		for range k {
			wg.Go(func() {
				sb, err := claimC.Create(ctx, client.CreateOptions{})
				if err != nil {
					t.Errorf("create: %v", err)
					return
				}
				r, err := claimC.Run(ctx, sb.ID, client.Command{Args: []string{"echo", "ready"}})
				d := time.Since(start)
				mu.Lock()
				defer mu.Unlock()
				ids = append(ids, sb.ID)
				if err != nil || string(r.Stdout) != "ready\n" {
					t.Errorf("run: %q %v", r.Stdout, err)
					return
				}
				claims = append(claims, d)
			})
		}
		wg.Wait()
		walls = append(walls, time.Since(start))
		if t.Failed() {
			t.FailNow()
		}
		for _, id := range ids {
			if err := claimC.Destroy(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		claimMade += k
		settle(claimP, claimMade)
		gone()
	}

	// The round trip of a command on a running sandbox: the agent's
	// against kubectl exec into the same pod.
	sb, err := coldC.Create(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := -1; i < n; i++ {
		start := time.Now()
		if r, err := coldC.Run(ctx, sb.ID, client.Command{Args: []string{"true"}}); err != nil || r.ExitStatus.Code != 0 {
			t.Fatalf("run true: %v %v", r.ExitStatus, err)
		}
		d := time.Since(start)
		start = time.Now()
		if r := c.Run(ctx, "", "exec", "hutch-"+sb.ID, "--", "true"); r.Err != nil {
			t.Fatalf("kubectl exec: %s", r)
		}
		e := time.Since(start)
		start = time.Now()
		if r := c.Run(ctx, "", "get", "pod", "hutch-"+sb.ID, "-o", "name"); r.Err != nil {
			t.Fatalf("kubectl get: %s", r)
		}
		if i >= 0 {
			log("exec: client.Run(true)", d)
			log("exec: kubectl exec true", e)
			log("kubectl get pod (kubectl's own cost)", time.Since(start))
		}
	}
	coldC.Destroy(ctx, sb.ID)

	// Two replicas: a command through the sandbox's own replica and
	// through the other (sent on), over TCP with a token; then the
	// take-over: the owner killed, until the other answers a command.
	const lease = 4 * time.Second
	r1, r2 := &replica{name: "b1"}, &replica{name: "b2"}
	startReplica(t, c, c.Kubeconfig, "rep", r1, "--kubernetes-lease", lease.String())
	startReplica(t, c, c.Kubeconfig, "rep", r2, "--kubernetes-lease", lease.String())
	tok, err := r1.p.client(t).CreateToken(ctx, client.TokenOptions{Tenant: "bench"})
	if err != nil {
		t.Fatal(err)
	}
	over := func(r *replica) *client.Client {
		cl, err := client.New(r.url, tok)
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	c1, c2 := over(r1), over(r2)
	runTrue := func(cl *client.Client, id string) time.Duration {
		t.Helper()
		start := time.Now()
		if r, err := cl.Run(ctx, id, client.Command{Args: []string{"true"}}); err != nil || r.ExitStatus.Code != 0 {
			t.Fatalf("run true: %v %v", r, err)
		}
		return time.Since(start)
	}
	sb, err = c1.Create(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := -1; i < n; i++ {
		d1, d2 := runTrue(c1, sb.ID), runTrue(c2, sb.ID)
		if i >= 0 {
			log("replicas: through its own (TCP)", d1)
			log("replicas: through the other (sent on)", d2)
		}
	}
	takeovers := max(1, n/5)
	for i := range takeovers {
		owner, other, oc := r1, r2, c2
		if i%2 == 1 {
			owner, other, oc = r2, r1, c1
		}
		start := time.Now()
		owner.p.stop(syscall.SIGKILL)
		if !testutil.Eventually(2*time.Minute, func() bool {
			r, err := oc.Run(ctx, sb.ID, client.Command{Args: []string{"true"}})
			return err == nil && r.ExitStatus.Code == 0
		}) {
			t.Fatalf("%s did not take %s over", other.name, sb.ID)
		}
		log("replicas: owner killed → a command answered by the other", time.Since(start))
		startReplica(t, c, c.Kubeconfig, "rep", owner, "--kubernetes-lease", lease.String())
	}
	c1.Destroy(ctx, sb.ID)

	out := os.Stdout
	if f := os.Getenv(benchOutEnv); f != "" {
		if out, err = os.Create(f); err != nil {
			t.Fatal(err)
		}
		defer out.Close()
	}
	md := os.Getenv(benchMarkdownEnv) == "1"
	tbl := &benchTable{md: md, times: times}
	tbl.print(out, fmt.Sprintf("Sandbox start to first output (n=%d)", n), "floor runc: first output",
		"floor runc: Running", "floor runc: first output", "floor hutch-runc: Running", "floor hutch-runc: first output", "hutch cold", "hutch warm")
	tbl.ratios(out, "floor hutch-runc: first output", "hutch cold", "hutch warm")
	tbl.print(out, fmt.Sprintf("Command round trip on a running sandbox's pod (n=%d)", n), "exec: kubectl exec true",
		"exec: client.Run(true)", "exec: kubectl exec true", "kubectl get pod (kubectl's own cost)")
	tbl.print(out, fmt.Sprintf("Two replicas: a command (true) on a running sandbox's pod (n=%d; take-over n=%d, Lease %s)", n, takeovers, lease),
		"replicas: through its own (TCP)", "replicas: through its own (TCP)", "replicas: through the other (sent on)",
		"replicas: owner killed → a command answered by the other")
	var wall time.Duration
	for _, w := range walls {
		wall += w
	}
	slices.Sort(claims)
	hits := strings.Count(claimP.log.String(), "warm=true")
	fmt.Fprintf(out, "\nClaims: %d rounds of %d concurrent creates from a full pool of %d (create → echo's output); %d of the %d took a warm sandbox\n",
		rounds, k, k, hits, rounds*k)
	if md {
		fmt.Fprintf(out, "\n| claims/s | p50 claim (ms) | p99 claim (ms) |\n|---:|---:|---:|\n| %.1f | %s | %s |\n",
			float64(rounds*k)/wall.Seconds(), ms(pct(claims, 50)), ms(pct(claims, 99)))
	} else {
		fmt.Fprintf(out, "claims/s %.1f  p50 %s ms  p99 %s ms\n", float64(rounds*k)/wall.Seconds(), ms(pct(claims, 50)), ms(pct(claims, 99)))
	}
}

// floorPod is the floor's pod name, of RuntimeClass class ("" for the
// default handler): the test image running `echo ready; exec sleep`, with
// the settings of a pod of hutch serve's (no restarts, no service
// account's token, no grace period, a workspace emptyDir, the same
// requests); of RuntimeClass hutch, it names the node policy serve.
func floorPod(name, class string) *corev1.Pod {
	falseV := false
	var zero int64
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"hutch.dev/bench": "floor"}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &falseV,
			EnableServiceLinks:            &falseV,
			TerminationGracePeriodSeconds: &zero,
			Volumes:                       []corev1.Volume{{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           ocitest.TestImage,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{"/bin/sh", "-c", "echo ready; exec sleep 3600"},
				WorkingDir:      daemon.DefaultWorkspace,
				VolumeMounts:    []corev1.VolumeMount{{Name: "workspace", MountPath: daemon.DefaultWorkspace}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse("10m"),
					corev1.ResourceMemory: resource.MustParse("16Mi"),
				}},
			}},
		},
	}
	if class != "" {
		p.Spec.RuntimeClassName = &class
		p.Annotations = map[string]string{kube.AnnotationPolicy: "serve"}
	}
	return p
}

// podsAPI is a client of the pods of the namespace default: client-go's
// REST client with the core kinds alone, as package kube speaks to the
// API server.
type podsAPI struct{ rc *rest.RESTClient }

// podsClient is the pods' client of the cluster of cfg.
func podsClient(t *testing.T, cfg *rest.Config) podsAPI {
	sch := runtime.NewScheme()
	if err := corev1.AddToScheme(sch); err != nil {
		t.Fatal(err)
	}
	metav1.AddToGroupVersion(sch, schema.GroupVersion{Version: "v1"})
	c := rest.CopyConfig(cfg)
	c.APIPath, c.GroupVersion = "/api", &corev1.SchemeGroupVersion
	c.NegotiatedSerializer = serializer.NewCodecFactory(sch).WithoutConversion()
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		t.Fatal(err)
	}
	return podsAPI{rc}
}

func (a podsAPI) req(verb string) *rest.Request {
	return a.rc.Verb(verb).Namespace("default").Resource("pods")
}

// watch watches the pods that the field selector sel selects.
func (a podsAPI) watch(ctx context.Context, sel string) (watch.Interface, error) {
	return a.req("GET").Param("watch", "true").Param("fieldSelector", sel).Watch(ctx)
}

// create creates p.
func (a podsAPI) create(ctx context.Context, p *corev1.Pod) error {
	return a.req("POST").Body(p).Do(ctx).Error()
}

// delete deletes the pod name.
func (a podsAPI) delete(name string) error {
	return a.req("DELETE").Name(name).Do(context.Background()).Error()
}

// follow is the log of the pod name, followed.
func (a podsAPI) follow(ctx context.Context, name string) (io.ReadCloser, error) {
	return a.req("GET").Name(name).SubResource("log").Param("follow", "true").Stream(ctx)
}

// count is the number of pods.
func (a podsAPI) count(ctx context.Context) (int, error) {
	var l corev1.PodList
	err := a.req("GET").Do(ctx).Into(&l)
	return len(l.Items), err
}

// benchTable prints the measures' percentiles.
type benchTable struct {
	md    bool
	times map[string][]time.Duration
}

// print prints a table titled title of the measures names: p50, p90 and
// the ratio of each p50 to base's.
func (b *benchTable) print(out *os.File, title, base string, names ...string) {
	b50 := pct(b.sorted(base), 50)
	if b.md {
		fmt.Fprintf(out, "\n| %s | p50 (ms) | p90 (ms) | p50 / %s |\n|---|---:|---:|---:|\n", title, base)
	} else {
		fmt.Fprintf(out, "\n%s\n", title)
	}
	for _, name := range names {
		s := b.sorted(name)
		p50, p90 := pct(s, 50), pct(s, 90)
		if b.md {
			fmt.Fprintf(out, "| %s | %s | %s | %.2f× |\n", name, ms(p50), ms(p90), float64(p50)/float64(b50))
		} else {
			fmt.Fprintf(out, "%-38s p50 %8s ms  p90 %8s ms  p50/%s %.2f×\n", name, ms(p50), ms(p90), base, float64(p50)/float64(b50))
		}
	}
}

// ratios prints the ratio of each name's p50 to base's, after a blank
// line (a list in markdown).
func (b *benchTable) ratios(out *os.File, base string, names ...string) {
	fmt.Fprintln(out)
	for _, name := range names {
		r := float64(pct(b.sorted(name), 50)) / float64(pct(b.sorted(base), 50))
		if b.md {
			fmt.Fprintf(out, "- %s / %s (p50): %.2f×\n", name, base, r)
		} else {
			fmt.Fprintf(out, "%s / %s (p50): %.2f×\n", name, base, r)
		}
	}
}

// sorted is name's times, sorted.
func (b *benchTable) sorted(name string) []time.Duration {
	return slices.SortedFunc(slices.Values(b.times[name]), cmp.Compare)
}

// pct is the p-th percentile (nearest rank) of the sorted s.
func pct(s []time.Duration, p int) time.Duration {
	if len(s) == 0 {
		return 0
	}
	i := int(math.Ceil(float64(p)*float64(len(s))/100)) - 1
	return s[max(i, 0)]
}

// ms is d in milliseconds, one decimal.
func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }
