package kube

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// StartTimeout bounds a sandbox's start: its pod scheduled, its image
// pulled, its agent answering.
var StartTimeout = 3 * time.Minute

// ErrUnsupported is what a pod's sandbox cannot do (pause, one-shot runs).
var ErrUnsupported = errors.New("not supported for sandboxes on Kubernetes")

// ErrGone is Attach's error for a sandbox whose pod is gone or ended.
var ErrGone = errors.New("the sandbox's pod is gone")

// Runtime runs the sandboxes of one tier as pods of its RuntimeClass.
type Runtime struct {
	c    *Cluster
	tier string
}

// Runtime is the runtime of tier, or an error when Options names no
// RuntimeClass for it.
func (c *Cluster) Runtime(tier string) (*Runtime, error) {
	if c.opts.RuntimeClasses[tier] == "" {
		return nil, fmt.Errorf("kubernetes: no RuntimeClass for tier %s", tier)
	}
	return &Runtime{c: c, tier: tier}, nil
}

// Tier names the tier.
func (r *Runtime) Tier() string { return r.tier }

// Run is refused: hutch run's one-shot sandboxes run on its own machine.
func (r *Runtime) Run(context.Context, sandbox.Config) (sandbox.Result, error) {
	return sandbox.Result{}, fmt.Errorf("kubernetes: a one-shot run: %w", ErrUnsupported)
}

// Start makes sandbox cfg.Name's Secret and pod, waits for the pod to run
// and for its agent to answer, and returns it.
func (r *Runtime) Start(cfg sandbox.Config) (sandbox.Instance, error) {
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	c := r.c
	if cfg.Name == "" {
		return nil, errors.New("kubernetes: a sandbox without a name")
	}
	pod, err := c.pod(cfg, c.opts.RuntimeClasses[r.tier])
	if err != nil {
		return nil, err
	}
	token, certPEM, keyPEM, err := credentials(pod.Name)
	if err != nil {
		return nil, err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: c.ns, Labels: c.labels(cfg.Name)},
		Data:       map[string][]byte{secretToken: []byte(token), secretCert: certPEM, secretKey: keyPEM},
	}
	if err := c.core.create(ctx, c.ns, "secrets", secret, secret); err != nil {
		return nil, fmt.Errorf("kubernetes: create secret %s: %w", secret.Name, err)
	}
	inst := &instance{c: c, name: pod.Name, done: make(chan struct{}), exit: -1, released: make(chan struct{})}
	fail := func(err error) (sandbox.Instance, error) {
		inst.Close()
		return nil, err
	}
	created := &corev1.Pod{}
	if err := c.core.create(ctx, c.ns, "pods", pod, created); err != nil {
		return fail(fmt.Errorf("kubernetes: create pod %s: %w", pod.Name, err))
	}
	inst.uid = string(created.UID)
	// The Secret goes with its pod, whoever deletes it.
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: created.Name, UID: created.UID}
	secret.OwnerReferences = []metav1.OwnerReference{owner}
	if err := c.core.update(ctx, c.ns, "secrets", secret.Name, secret, secret); err != nil {
		return fail(fmt.Errorf("kubernetes: secret %s: owner: %w", secret.Name, err))
	}
	ip, err := inst.waitRunning(ctx, created.ResourceVersion)
	if err != nil {
		return fail(err)
	}
	if err := inst.connect(ctx, created.ResourceVersion, ip, token, certPEM); err != nil {
		return fail(err)
	}
	return inst, nil
}

// connect watches the pod from resource version rv on and connects to
// its agent at ip.
func (i *instance) connect(ctx context.Context, rv, ip, token string, certPEM []byte) error {
	go i.watch(rv)
	conn, err := dialAgent(ctx, net.JoinHostPort(ip, strconv.Itoa(i.c.opts.AgentPort)), token, certPEM, i.done)
	if err != nil {
		return fmt.Errorf("kubernetes: pod %s: its agent: %w", i.name, err)
	}
	i.conn = conn
	return nil
}

// AttachTimeout bounds Attach's connection to a running pod's agent.
var AttachTimeout = 30 * time.Second

// Attach takes sandbox id's pod, which a previous run of the daemon
// started and which still runs, again: its agent, reached with the token
// and certificate of its Secret, takes this connection over from any
// before it. A pod that does not run any more is deleted.
func (r *Runtime) Attach(id string) (sandbox.Instance, error) {
	ctx, cancel := context.WithTimeout(context.Background(), AttachTimeout)
	defer cancel()
	c := r.c
	name := podName(id)
	pod := &corev1.Pod{}
	if err := c.core.get(ctx, c.ns, "pods", name, pod); apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("kubernetes: pod %s: %w", name, ErrGone)
	} else if err != nil {
		return nil, fmt.Errorf("kubernetes: pod %s: %w", name, err)
	}
	inst := &instance{c: c, name: name, uid: string(pod.UID), done: make(chan struct{}), exit: -1, released: make(chan struct{})}
	fail := func(err error) (sandbox.Instance, error) {
		inst.Close()
		return nil, err
	}
	if pod.Labels[LabelSandbox] != id || pod.Labels[LabelDaemon] != c.opts.Daemon || pod.DeletionTimestamp != nil {
		return nil, fmt.Errorf("kubernetes: pod %s is not sandbox %s's of hutch serve %s, or it is being deleted: %w", name, id, c.opts.Daemon, ErrGone)
	}
	if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" {
		return fail(fmt.Errorf("kubernetes: pod %s does not run (%s): %w", name, pod.Status.Phase, ErrGone))
	}
	secret := &corev1.Secret{}
	if err := c.core.get(ctx, c.ns, "secrets", name, secret); err != nil {
		return fail(fmt.Errorf("kubernetes: secret %s: %w", name, err))
	}
	if err := inst.connect(ctx, pod.ResourceVersion, pod.Status.PodIP, string(secret.Data[secretToken]), secret.Data[secretCert]); err != nil {
		return fail(err)
	}
	return inst, nil
}

// credentials makes a sandbox's token and the TLS certificate and key of
// its agent (ECDSA P-256, self-signed, named after its pod).
func credentials(name string) (token string, certPEM, keyPEM []byte, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return "", nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", nil, nil, err
	}
	return hex.EncodeToString(b[:]), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// pinned is a TLS client configuration that trusts certPEM alone, as the
// certificate of the agent named in it.
func pinned(certPEM []byte) (*tls.Config, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return nil, errors.New("no certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{RootCAs: pool, ServerName: cert.Subject.CommonName, MinVersion: tls.VersionTLS13}, nil
}

// dialAgent connects to the agent at addr, again while it does not listen
// yet, until ctx ends or the pod does (gone).
func dialAgent(ctx context.Context, addr, token string, certPEM []byte, gone <-chan struct{}) (net.Conn, error) {
	tc, err := pinned(certPEM)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	dial := func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	for {
		conn, err := agent.DialConn(ctx, dial, token, tc)
		if err == nil {
			return conn, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: %w", addr, err)
		case <-gone:
			return nil, fmt.Errorf("the pod ended: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// instance is a sandbox's pod, as the daemon holds it.
type instance struct {
	c         *Cluster
	name, uid string
	conn      net.Conn
	done      chan struct{}
	mu        sync.Mutex
	exit      int
	closeOnce sync.Once
	// released is closed by Release: the pod is not this daemon's to
	// watch any more.
	released chan struct{}
}

// waitRunning waits for the pod to run with an IP, and returns the IP.
func (i *instance) waitRunning(ctx context.Context, from string) (string, error) {
	w, err := i.c.core.watch(ctx, i.c.ns, "pods", metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", i.name).String(),
		ResourceVersion: from,
	})
	if err != nil {
		return "", fmt.Errorf("kubernetes: watch pod %s: %w", i.name, err)
	}
	defer w.Stop()
	var last *corev1.Pod
	var stuck stuckSince
	for {
		// A pod stuck in a retried reason may get no other update:
		// its start is given up when the grace ends.
		var recheck <-chan time.Time
		if stuck.reason != "" {
			recheck = time.After(time.Until(stuck.since.Add(RetryGrace)))
		}
		select {
		case <-recheck:
			if why := stuck.why(last, time.Now()); why != "" {
				return "", fmt.Errorf("kubernetes: pod %s: %s", i.name, why)
			}
		case <-ctx.Done():
			return "", fmt.Errorf("kubernetes: pod %s did not run within %s%s: %w", i.name, StartTimeout, pendingWhy(last), ctx.Err())
		case ev, ok := <-w.ResultChan():
			if !ok {
				// The watch ended early (the API server's timeout): again.
				return i.waitRunning(ctx, "")
			}
			if ev.Type == watch.Deleted {
				return "", fmt.Errorf("kubernetes: pod %s was deleted", i.name)
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			last = p
			switch p.Status.Phase {
			case corev1.PodRunning:
				if p.Status.PodIP != "" {
					return p.Status.PodIP, nil
				}
			case corev1.PodSucceeded, corev1.PodFailed:
				return "", fmt.Errorf("kubernetes: pod %s ended before its agent ran: %s", i.name, podWhy(p))
			case corev1.PodPending:
				if why := stuck.why(p, time.Now()); why != "" {
					return "", fmt.Errorf("kubernetes: pod %s: %s", i.name, why)
				}
			}
		}
	}
}

// podWhy says how a pod's container ended.
func podWhy(p *corev1.Pod) string {
	for _, s := range p.Status.ContainerStatuses {
		if t := s.State.Terminated; t != nil {
			return fmt.Sprintf("exit code %d (%s) %s", t.ExitCode, t.Reason, t.Message)
		}
	}
	return string(p.Status.Phase) + " " + p.Status.Message
}

// pendingWhy says why p has not run yet, as its conditions that are not
// met tell ("" when they tell nothing).
func pendingWhy(p *corev1.Pod) string {
	if p == nil {
		return ""
	}
	var why string
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			why += fmt.Sprintf(" (%s: %s)", c.Type, c.Message)
		}
	}
	return why
}

// RetryGrace is how long a pending pod's container may stay in a waiting
// reason the kubelet retries (retriedReasons) before its start is given
// up: long enough for the kubelet's next attempts, which back off (10 s,
// 20 s, 40 s…): on a busy node its secret cache took over 30 s to sync.
// StartTimeout still bounds the whole start.
var RetryGrace = 2 * time.Minute

// retriedReasons are the waiting reasons of a container that the kubelet
// retries and that can pass by themselves: a busy API server's
// "failed to sync secret cache" is a CreateContainerConfigError, a
// runtime's timeout a CreateContainerError or RunContainerError. Others
// (ImagePullBackOff, which comes after the kubelet's retry of a pull,
// InvalidImageName) say at once that the pod will not start.
var retriedReasons = map[string]bool{"CreateContainerError": true, "CreateContainerConfigError": true, "RunContainerError": true}

// stuckSince tells, for one pod's start, when its containers began to
// wait for a reason the kubelet retries.
type stuckSince struct {
	reason string
	since  time.Time
}

// why is the reason p's start is given up at now, or "": an image that
// cannot be pulled or named at once; a reason the kubelet retries once
// its containers have waited for it RetryGrace.
func (st *stuckSince) why(p *corev1.Pod, now time.Time) string {
	for _, s := range p.Status.ContainerStatuses {
		w := s.State.Waiting
		if w == nil {
			continue
		}
		switch {
		case w.Reason == "ImagePullBackOff" || w.Reason == "InvalidImageName":
			return w.Reason + ": " + w.Message
		case retriedReasons[w.Reason]:
			if st.reason != w.Reason {
				st.reason, st.since = w.Reason, now
			}
			if now.Sub(st.since) >= RetryGrace {
				return fmt.Sprintf("%s for %s: %s", w.Reason, now.Sub(st.since).Round(time.Second), w.Message)
			}
			return ""
		}
	}
	st.reason = ""
	return ""
}

// watch closes done once the pod has ended or is gone, with its exit
// code; it stops at Release.
func (i *instance) watch(from string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-i.released:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		w, err := i.c.core.watch(ctx, i.c.ns, "pods", metav1.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", i.name).String(),
			ResourceVersion: from,
		})
		if err != nil {
			select {
			case <-i.done:
				return
			case <-i.released:
				return
			case <-time.After(time.Second):
			}
			from = ""
			continue
		}
		for ev := range w.ResultChan() {
			p, _ := ev.Object.(*corev1.Pod)
			if p != nil {
				from = p.ResourceVersion
				if string(p.UID) != i.uid {
					// Another pod of the name: this one is gone.
					i.end(-1)
					w.Stop()
					return
				}
			}
			switch {
			case ev.Type == watch.Deleted:
				i.end(exitCode(p))
				w.Stop()
				return
			case ev.Type == watch.Error:
				from = ""
			case p != nil && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed):
				i.end(exitCode(p))
				w.Stop()
				return
			}
		}
		w.Stop()
		select {
		case <-i.done:
			return
		case <-i.released:
			return
		default:
		}
	}
}

// exitCode is the exit code of p's container, -1 when unknown.
func exitCode(p *corev1.Pod) int {
	if p == nil {
		return -1
	}
	for _, s := range p.Status.ContainerStatuses {
		if t := s.State.Terminated; t != nil {
			return int(t.ExitCode)
		}
	}
	return -1
}

func (i *instance) end(code int) {
	i.mu.Lock()
	defer i.mu.Unlock()
	select {
	case <-i.done:
	default:
		i.exit = code
		close(i.done)
	}
}

// Conn is the connection to the pod's agent.
func (i *instance) Conn() net.Conn { return i.conn }

// Done is closed once the pod has ended or is gone.
func (i *instance) Done() <-chan struct{} { return i.done }

// ExitCode is the agent's exit code, -1 when unknown.
func (i *instance) ExitCode() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.exit
}

// PID is 0: nothing of the sandbox is a process of this machine's.
func (i *instance) PID() int { return 0 }

// Pod is the name of the sandbox's pod.
func (i *instance) Pod() string { return i.name }

// Dropped is empty: a pod's confinement is the node's, whole or refused.
func (i *instance) Dropped() []string { return nil }

// Freeze is refused.
func (i *instance) Freeze() error { return fmt.Errorf("pause: %w", ErrUnsupported) }

// Thaw is refused.
func (i *instance) Thaw() error { return fmt.Errorf("resume: %w", ErrUnsupported) }

// Close deletes the pod at once (its Secret goes with it) and the
// connection to its agent.
func (i *instance) Close() error {
	var err error
	i.closeOnce.Do(func() {
		if i.conn != nil {
			i.conn.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var zero int64
		del := metav1.DeleteOptions{GracePeriodSeconds: &zero}
		if e := i.c.core.delete(ctx, i.c.ns, "pods", i.name, del); e != nil && !apierrors.IsNotFound(e) {
			err = fmt.Errorf("kubernetes: delete pod %s: %w", i.name, e)
		}
		if e := i.c.core.delete(ctx, i.c.ns, "secrets", i.name, metav1.DeleteOptions{}); e != nil && !apierrors.IsNotFound(e) && err == nil {
			err = fmt.Errorf("kubernetes: delete secret %s: %w", i.name, e)
		}
		i.end(-1)
	})
	return err
}

// Release lets go of the pod without deleting it — its agent's
// connection, the watch of it — for another daemon to take (Attach).
func (i *instance) Release() {
	i.closeOnce.Do(func() {
		if i.conn != nil {
			i.conn.Close()
		}
		close(i.released)
	})
}

// Remote names where the sandboxes run.
func (r *Runtime) Remote() string { return "Kubernetes" }

// Unsupported says what of s a pod cannot honour, or "".
func (r *Runtime) Unsupported(s policy.Spec) string { return Unsupported(s) }

// Sweep deletes the pods and Secrets of this daemon's name that keep
// does not want, given each one's sandbox and the replica that made it
// ("" for a hutch serve alone): nobody holds their agents any more.
func (r *Runtime) Sweep(ctx context.Context, keep func(id, replica string) bool) error {
	c := r.c
	// Only what belongs to a sandbox: the Store keeps tokens in Secrets
	// too.
	sel := metav1.ListOptions{LabelSelector: LabelManaged + "=hutch," + LabelDaemon + "=" + c.opts.Daemon + "," + LabelSandbox}
	var pods corev1.PodList
	if err := c.core.list(ctx, c.ns, "pods", sel, &pods); err != nil {
		return fmt.Errorf("the pods of a previous run: %w", err)
	}
	var zero int64
	for _, p := range pods.Items {
		if keep(p.Labels[LabelSandbox], p.Labels[LabelReplica]) {
			continue
		}
		if err := c.core.delete(ctx, c.ns, "pods", p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete pod %s of a previous run: %w", p.Name, err)
		}
	}
	// Secrets whose pod never was made, or went: their owner took the
	// others with it.
	var secrets corev1.SecretList
	if err := c.core.list(ctx, c.ns, "secrets", sel, &secrets); err != nil {
		return fmt.Errorf("the secrets of a previous run: %w", err)
	}
	for _, sec := range secrets.Items {
		if keep(sec.Labels[LabelSandbox], sec.Labels[LabelReplica]) {
			continue
		}
		if err := c.core.delete(ctx, c.ns, "secrets", sec.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete secret %s of a previous run: %w", sec.Name, err)
		}
	}
	return nil
}

// Remove deletes sandbox id's pod and Secret, if any: a sandbox another
// replica served and left (a replica gone while it started or ended one).
func (r *Runtime) Remove(ctx context.Context, id string) error {
	c := r.c
	name := podName(id)
	var zero int64
	if err := c.core.delete(ctx, c.ns, "pods", name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kubernetes: delete pod %s: %w", name, err)
	}
	if err := c.core.delete(ctx, c.ns, "secrets", name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kubernetes: delete secret %s: %w", name, err)
	}
	return nil
}

// Gone reports whether err, of Attach, says the sandbox's pod is gone.
func (r *Runtime) Gone(err error) bool { return errors.Is(err, ErrGone) }
