package oci

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testutil"
	"github.com/hutch-sandbox/hutch/internal/testutil/ocitest"
)

// dockerGateway is the address of dockerd's default bridge on its side,
// where a test's upstream listens.
const dockerGateway = "172.17.0.1"

// TestDockerEgress: a container of hutch-runc reaches, through hutch's
// proxy on its loopback, what the node policy its runtime names allows,
// and nothing else — not a denied host through the proxy, not the
// allowed host's address directly (its network namespace lets nothing
// out but through the proxy), no lookup out; without a policy it
// reaches nothing; on the host's network it does not start. The proxy
// ends with the container.
func TestDockerEgress(t *testing.T) {
	policies := t.TempDir()
	rt := ocitest.HutchRunc(t)
	d := ocitest.StartDocker(t, map[string]ocitest.Runtime{
		"hutch":         {Path: rt, Args: []string{"--hutch-policy-dir", policies}},
		"hutch-allowed": {Path: rt, Args: []string{"--hutch-policy-dir", policies, "--hutch-policy", "allowed"}},
	})
	d.Load(t, imageTar(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The bridge exists once dockerd has made it: a first container.
	port := gatewayUpstream(t, ctx, d, policies)

	// busybox's wget crashes (a static glibc's lookups); nc speaks for it.
	get := func(host string, port int, url string) string {
		return fmt.Sprintf(`printf 'GET %s HTTP/1.0\r\n\r\n' | nc -w 10 %s %d 2>&1`, url, host, port)
	}
	// Without hutch, the container reaches the upstream directly: what
	// the firewall refuses below is refused by hutch.
	direct := get(dockerGateway, port, "/direct")
	if r := d.Run(ctx, "run", "--rm", testImage, "sh", "-c", direct); !strings.Contains(r.Stdout, "hello from upstream /direct") {
		t.Fatalf("runc's container does not reach the upstream: %s", r)
	}

	r := d.Run(ctx, "run", "--rm", "--runtime", "hutch-allowed", testImage, "sh", "-c", strings.Join([]string{
		"echo proxy=$http_proxy",
		get("127.0.0.1", 3128, fmt.Sprintf("http://allowed.test:%d/through", port)),
		get("127.0.0.1", 3128, "http://denied.test/"),
		direct, "echo direct=$?",
		"nslookup allowed.test; echo lookup=$?",
		"cat /etc/resolv.conf",
	}, "; "))
	for _, want := range []string{"proxy=http://127.0.0.1:3128", "hello from upstream /through", "403 Forbidden", "direct=1", "NXDOMAIN", "lookup=1", "nameserver 127.0.0.1"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("no %q in:\n%s", want, r)
		}
	}
	if strings.Contains(r.Stdout, "/direct") {
		t.Errorf("the container reached the upstream around the proxy:\n%s", r)
	}

	// No policy: nothing allowed, and told so.
	r = d.Run(ctx, "run", "--rm", "--runtime", "hutch", testImage, "sh", "-c", get("127.0.0.1", 3128, fmt.Sprintf("http://allowed.test:%d/", port)))
	if !strings.Contains(r.Stdout, "403 Forbidden") || !strings.Contains(r.Stdout, "no network") {
		t.Errorf("without a policy: %s", r)
	}

	// The host's network: refused, naming why.
	r = d.Run(ctx, "run", "--rm", "--network", "host", "--runtime", "hutch-allowed", testImage, "true")
	if r.Code == 0 || !strings.Contains(r.Stderr, "network of its own") {
		t.Errorf("--network host: %s", r)
	}

	// The proxy ends with its container.
	if r := d.Run(ctx, "run", "-d", "--name", "proxied", "--runtime", "hutch-allowed", testImage, "sleep", "600"); r.Err != nil {
		t.Fatalf("run -d: %s", r)
	}
	if n := len(proxies(d.Dir())); n != 1 {
		t.Errorf("%d egress proxies with one container", n)
	}
	// docker exec's processes get the proxy's variables too (Docker
	// gives them the environment it knows, without hutch's).
	if r := d.Run(ctx, "exec", "proxied", "sh", "-c", "echo proxy=$http_proxy"); !strings.Contains(r.Stdout, "proxy=http://127.0.0.1:3128") {
		t.Errorf("docker exec's environment: %s", r)
	}
	if r := d.Run(ctx, "exec", "-e", "HTTPS_PROXY=http://elsewhere:1", "proxied", "sh", "-c", "echo proxy=$HTTPS_PROXY"); !strings.Contains(r.Stdout, "proxy=http://127.0.0.1:3128") {
		t.Errorf("docker exec -e HTTPS_PROXY: %s", r)
	}
	if r := d.Run(ctx, "rm", "-f", "proxied"); r.Err != nil {
		t.Errorf("rm: %s", r)
	}
	if left := proxies(d.Dir()); len(left) != 0 {
		t.Errorf("egress proxies left after the container: %v", left)
	}
}

// proxies are the pids of hutch-runc's egress proxies running whose
// command line (their container's state directory) holds scope: an
// engine's directory or namespace, so that another engine's proxies (a
// test run beside) are not counted.
func proxies(scope string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.HasPrefix(string(b), "hutch-runc\x00egress-proxy\x00") && strings.Contains(string(b), scope) {
			out = append(out, pid)
		}
	}
	return out
}

// TestDockerSecrets: a secret of the node policy reaches its host, over
// TLS the proxy intercepts (the container trusts the proxy's CA: the
// bundle it finds where its TLS clients look), as the real value where the
// container holds only a placeholder; the placeholder goes nowhere else.
func TestDockerSecrets(t *testing.T) {
	policies, dir := t.TempDir(), t.TempDir()
	const real = "sk-real-value-0123456789"
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(real+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsConf := testutil.NewServerTLS(t, "secret.test")
	ca := filepath.Join(dir, "upstream-ca.pem")
	if err := os.WriteFile(ca, tlsConf.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	rt := ocitest.HutchRunc(t)
	d := ocitest.StartDocker(t, map[string]ocitest.Runtime{
		"hutch": {Path: rt, Args: []string{"--hutch-policy-dir", policies, "--hutch-policy", "secret", "--hutch-upstream-ca", ca}},
	})
	d.Load(t, imageTar(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if r := d.Run(ctx, "run", "--rm", testImage, "true"); r.Err != nil {
		t.Fatalf("a container of runc: %s", r)
	}
	l := d.Listen(t, "tcp", dockerGateway+":0")
	port := l.Addr().(*net.TCPAddr).Port
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("Authorization") {
		case "Bearer " + real:
			fmt.Fprintln(w, "the real value arrived")
		default:
			fmt.Fprintf(w, "something else arrived: %d bytes\n", len(r.Header.Get("Authorization")))
		}
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{tlsConf.Cert}}}
	go srv.ServeTLS(l, "", "")
	plain := d.Listen(t, "tcp", dockerGateway+":0")
	plainPort := plain.Addr().(*net.TCPAddr).Port
	go http.Serve(plain, srv.Handler)
	if err := os.WriteFile(filepath.Join(policies, "secret.yaml"), []byte(fmt.Sprintf(`network:
  allowed_domains: ["other.test:%[4]d"]
  hosts: ["secret.test:%[2]s", "other.test:%[2]s"]
  allow_private: ["%[2]s/32"]
secrets:
  - name: API_TOKEN
    hosts: ["secret.test:%[1]d"]
    from: file:%[3]s
`, port, dockerGateway, filepath.Join(dir, "token"), plainPort)), 0o644); err != nil {
		t.Fatal(err)
	}
	r := d.Run(ctx, "run", "--rm", "--runtime", "hutch", testImage, "sh", "-c", fmt.Sprintf(
		`echo "token=$API_TOKEN"; fetch https://secret.test:%[1]d/ "Authorization=Bearer $API_TOKEN"; fetch http://other.test:%[2]d/ "Authorization=Bearer $API_TOKEN"`, port, plainPort))
	if !strings.Contains(r.Stdout, "status 200\nthe real value arrived") {
		t.Errorf("the secret's host did not get the real value:\n%s", r)
	}
	if strings.Contains(r.Stdout, real) || strings.Contains(r.Stdout, "token=\n") {
		t.Errorf("the container holds the real value, or no placeholder:\n%s", r)
	}
	if strings.Count(r.Stdout, "arrived") != 1 || !strings.Contains(r.Stdout, "status 403") {
		t.Errorf("the placeholder went to another host:\n%s", r)
	}
}

// TestContainerdSharedNetwork: containers that join one network namespace
// (a pod's: its sandbox made it, the others join it by path) share one
// proxy, the first's, and its policy; a container that asks for another
// policy in that namespace is refused; the proxy ends with the first.
func TestContainerdSharedNetwork(t *testing.T) {
	ocitest.Need(t, "iproute2:ip")
	policies := t.TempDir()
	c := ocitest.StartContainerd(t, ocitest.PolicyDirEnv+"="+policies)
	c.Import(t, imageTar(t))
	rt := ocitest.HutchRunc(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	port := ocitest.LoopbackUpstream(t, "hello from the pod's upstream\n")
	for name, domain := range map[string]string{"pod": "upstream.test", "other": "elsewhere.test"} {
		ocitest.LoopbackPolicy(t, policies, name, domain, port)
	}
	ns := fmt.Sprintf("hutch-oci-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	join := []string{"--runc-binary", rt, "--with-ns", "network:/var/run/netns/" + ns}

	if r := c.Ctr(ctx, append(append([]string{"run", "-d"}, join...), "--annotation", "dev.hutch.policy=pod", testImage, "sandbox", "sleep", "600")...); r.Err != nil {
		t.Fatalf("the first container: %s", r)
	}
	r := c.Ctr(ctx, append(append([]string{"run", "--rm"}, join...), "--annotation", "dev.hutch.policy=pod", testImage, "app",
		"sh", "-c", fmt.Sprintf("fetch http://upstream.test:%d/", port))...)
	if !strings.Contains(r.Stdout, "hello from the pod's upstream") {
		t.Errorf("the joining container through the namespace's proxy: %s", r)
	}
	if n := len(proxies(c.Namespace)); n != 1 {
		t.Errorf("%d egress proxies for one network namespace", n)
	}
	r = c.Ctr(ctx, append(append([]string{"run", "--rm"}, join...), "--annotation", "dev.hutch.policy=other", testImage, "stranger", "true")...)
	if r.Code == 0 || !strings.Contains(r.Stderr, "policy differs") {
		t.Errorf("a container of another policy in the namespace: %s", r)
	}
	c.Ctr(ctx, "tasks", "kill", "-s", "SIGKILL", "sandbox")
	testutil.Eventually(30*time.Second, func() bool { return strings.Contains(c.Ctr(ctx, "tasks", "ls").Stdout, "STOPPED") })
	if r := c.Ctr(ctx, "tasks", "delete", "sandbox"); r.Err != nil {
		t.Errorf("tasks delete: %s", r)
	}
	if left := proxies(c.Namespace); len(left) != 0 {
		t.Errorf("egress proxies left after the namespace's first container: %v", left)
	}
}

// gatewayUpstream makes d's bridge (a container of runc), serves "hello
// from upstream PATH" on its gateway's side, and writes the node policy
// "allowed" into policies: that upstream as allowed.test, and nothing
// else. It returns the upstream's port.
func gatewayUpstream(t *testing.T, ctx context.Context, d *ocitest.Docker, policies string) int {
	t.Helper()
	if r := d.Run(ctx, "run", "--rm", testImage, "true"); r.Err != nil {
		t.Fatalf("a container of runc: %s", r)
	}
	l := d.Listen(t, "tcp", dockerGateway+":0")
	port := l.Addr().(*net.TCPAddr).Port
	go http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from upstream %s\n", r.URL.Path)
	}))
	if err := os.WriteFile(filepath.Join(policies, "allowed.yaml"), []byte(fmt.Sprintf(`network:
  allowed_domains: ["allowed.test:%d"]
  hosts: ["allowed.test:%s"]
  allow_private: ["%[2]s/32"]
`, port, dockerGateway)), 0o644); err != nil {
		t.Fatal(err)
	}
	return port
}
