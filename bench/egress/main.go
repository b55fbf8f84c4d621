//go:build linux

// Command egress measures hutch's egress proxy against a direct connection
// in the same run: the throughput of a large download from a loopback
// server (curl, direct on the host versus inside `hutch run --net proxy`
// through CONNECT and through plain HTTP forwarding), and the latency a
// proxy adds to a new connection and to a request on a kept-alive one
// (hutch's proxy code serving a loopback listener, driven by a Go client).
// bench/egress.sh builds hutch and runs it.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/bench/report"
	"github.com/hutch-sandbox/hutch/internal/egress"
)

func main() {
	hutch := flag.String("hutch", "", "path of the hutch binary (required for the throughput runs)")
	size := flag.Int64("size", 1<<30, "bytes per download")
	runs := flag.Int("runs", 3, "downloads per way (the median is reported)")
	n := flag.Int("n", 2000, "latency samples per way")
	markdown := flag.Bool("markdown", false, "print markdown tables")
	flag.Parse()

	up, err := startUpstream()
	if err != nil {
		fail(err)
	}
	_, port, _ := net.SplitHostPort(up)
	p, proxyAddr, err := startProxy(port)
	if err != nil {
		fail(err)
	}
	defer p.Close()
	tp := report.NewTable(*markdown, "download", "MiB/s (median of "+strconv.Itoa(*runs)+")", "ratio to direct")
	if *hutch != "" {
		url := fmt.Sprintf("http://%%s:%s/bytes?n=%d", port, *size)
		direct := median(*runs, func() float64 {
			return curl(nil, fmt.Sprintf(url, "127.0.0.1"), false)
		})
		sandbox := []string{*hutch, "run", "--net", "proxy", "--allow-domain", "up.test:" + port,
			"--add-host", "up.test:127.0.0.1", "--allow-private", "127.0.0.1/32", "--"}
		connect := median(*runs, func() float64 { return curl(sandbox, fmt.Sprintf(url, "up.test"), true) })
		forward := median(*runs, func() float64 { return curl(sandbox, fmt.Sprintf(url, "up.test"), false) })
		onHost := []string{"env", "http_proxy=http://" + proxyAddr}
		hostConnect := median(*runs, func() float64 { return curl(onHost, fmt.Sprintf(url, "up.test"), true) })
		tp.Row("direct (curl on the host)", mib(direct), "1.00")
		tp.Row("hutch CONNECT (curl -p in the sandbox)", mib(connect), fmt.Sprintf("%.2f", connect/direct))
		tp.Row("hutch HTTP forwarding (curl in the sandbox)", mib(forward), fmt.Sprintf("%.2f", forward/direct))
		tp.Row("proxy code alone, CONNECT (curl -p on the host)", mib(hostConnect), fmt.Sprintf("%.2f", hostConnect/direct))
		tp.Print(os.Stdout)
	}

	// p50 and p99 are nearest-rank percentiles: see report.Percentile.
	tl := report.NewTable(*markdown, "latency", "p50 µs", "p99 µs", "added p50 µs", "added p99 µs")
	newDirect := samples(*n, func() error { return oneShot(up, "") })
	newProxied := samples(*n, func() error { return oneShot(proxyAddr, "up.test:"+port) })
	keptDirect, err := keptAlive(*n, up, "")
	if err != nil {
		fail(err)
	}
	keptProxied, err := keptAlive(*n, proxyAddr, "up.test:"+port)
	if err != nil {
		fail(err)
	}
	for _, r := range []struct {
		name        string
		got, direct []time.Duration
	}{
		{"new connection, direct", newDirect, nil},
		{"new connection, through CONNECT", newProxied, newDirect},
		{"kept-alive request, direct", keptDirect, nil},
		{"kept-alive request, through CONNECT", keptProxied, keptDirect},
	} {
		added50, added99 := "-", "-"
		if r.direct != nil {
			added50 = us(report.Percentile(r.got, 50) - report.Percentile(r.direct, 50))
			added99 = us(report.Percentile(r.got, 99) - report.Percentile(r.direct, 99))
		}
		tl.Row(r.name, us(report.Percentile(r.got, 50)), us(report.Percentile(r.got, 99)), added50, added99)
	}
	tl.Print(os.Stdout)
}

// startUpstream serves /bytes?n=N (N zero bytes) and a small /hello on a
// loopback port.
func startUpstream() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	zeros := make([]byte, 1<<20)
	mux := http.NewServeMux()
	mux.HandleFunc("/bytes", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		for n > 0 {
			k := min(n, int64(len(zeros)))
			if _, err := w.Write(zeros[:k]); err != nil {
				return
			}
			n -= k
		}
	})
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })
	go func() { _ = http.Serve(l, mux) }()
	return l.Addr().String(), nil
}

// startProxy runs hutch's proxy code on a loopback listener, with the rules
// a sandbox allowed to reach the upstream would have.
func startProxy(port string) (*egress.Proxy, string, error) {
	rules, err := egress.NewRules(egress.Config{
		AllowDomains: []string{"up.test:" + port},
		AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		Hosts:        map[string][]netip.Addr{"up.test": {netip.MustParseAddr("127.0.0.1")}},
		Lookup:       func(string) ([]netip.Addr, error) { return nil, fmt.Errorf("no lookups in the benchmark") },
	})
	if err != nil {
		return nil, "", err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	p := &egress.Proxy{Rules: rules, Sandbox: "bench"}
	go func() { _ = p.ServeHTTP(l) }()
	return p, l.Addr().String(), nil
}

// curl downloads url with curl (inside the sandbox when prefix is the
// hutch command) and returns bytes per second.
func curl(prefix []string, url string, tunnel bool) float64 {
	args := append(slices.Clone(prefix), "curl", "-sS", "-o", "/dev/null", "-w", "%{speed_download}")
	if tunnel {
		args = append(args, "-p")
	}
	args = append(args, url)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		fail(fmt.Errorf("%s: %w", strings.Join(args, " "), err))
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil {
		fail(fmt.Errorf("curl printed %q", out))
	}
	return v
}

// oneShot opens a connection (a CONNECT tunnel to target when target is
// set), makes one request and closes it.
func oneShot(addr, target string) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	br := bufio.NewReader(c)
	if target != "" {
		if err := tunnel(c, br, target); err != nil {
			return err
		}
	}
	return request(c, br)
}

// keptAlive makes n requests on one connection and times each.
func keptAlive(n int, addr, target string) ([]time.Duration, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	br := bufio.NewReader(c)
	if target != "" {
		if err := tunnel(c, br, target); err != nil {
			return nil, err
		}
	}
	return samples(n, func() error { return request(c, br) }), nil
}

func tunnel(c net.Conn, br *bufio.Reader, target string) error {
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("CONNECT %s: %s", target, resp.Status)
	}
	return nil
}

func request(c net.Conn, br *bufio.Reader) error {
	if _, err := io.WriteString(c, "GET /hello HTTP/1.1\r\nHost: up.test\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return err
}

func samples(n int, f func() error) []time.Duration {
	out := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := f(); err != nil {
			fail(err)
		}
		out = append(out, time.Since(t0))
	}
	return out
}

func median(runs int, f func() float64) float64 {
	v := make([]float64, runs)
	for i := range v {
		v[i] = f()
	}
	slices.Sort(v)
	return v[len(v)/2]
}

func mib(bps float64) string    { return fmt.Sprintf("%.0f", bps/(1<<20)) }
func us(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Microsecond)) }
func fail(err error)            { fmt.Fprintln(os.Stderr, "egress:", err); os.Exit(1) }
