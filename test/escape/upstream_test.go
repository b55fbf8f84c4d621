//go:build linux

package escape

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Upstreams for the egress tests: real servers on the host's loopback (or
// the host's own address) that the sandbox's proxy may or may not reach.
// Each records what arrived, so a test can assert that a refused attack
// delivered nothing, not merely that the client saw an error.

// upstream is one host server and what it received.
type upstream struct {
	addr     string // host:port it listens on
	port     string
	accepted atomic.Int64 // connections accepted
	mu       sync.Mutex
	got      []string // requests ("GET /path") or echoed lines, in order
}

func (u *upstream) record(s string) {
	u.mu.Lock()
	u.got = append(u.got, s)
	u.mu.Unlock()
}

// received returns what arrived so far, sorted.
func (u *upstream) received() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Sorted(slices.Values(u.got))
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func listenUpstream(t *testing.T, addr string) (net.Listener, *upstream) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	u := &upstream{addr: l.Addr().String()}
	_, u.port, _ = net.SplitHostPort(u.addr)
	t.Cleanup(func() { l.Close() })
	return countingListener{l, &u.accepted}, u
}

// startWeb serves HTTP on addr ("127.0.0.1:0"), or HTTPS when cfg is not
// nil. Every request is recorded as "METHOD PATH" and answered with
// "upstream PATH".
func startWeb(t *testing.T, addr string, cfg *tls.Config) *upstream {
	t.Helper()
	l, u := listenUpstream(t, addr)
	var ln net.Listener = l
	if cfg != nil {
		ln = tls.NewListener(l, cfg)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u.record(r.Method + " " + r.URL.Path)
			fmt.Fprintf(w, "upstream %s\n", r.URL.Path)
		}),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return u
}

// startEcho serves a line echo on addr: it reads one line per connection,
// records it, writes it back and hangs up.
func startEcho(t *testing.T, addr string) *upstream {
	t.Helper()
	l, u := listenUpstream(t, addr)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				line, err := bufio.NewReader(c).ReadString('\n')
				if err != nil {
					return
				}
				u.record(strings.TrimSuffix(line, "\n"))
				_, _ = c.Write([]byte(line))
			}()
		}
	}()
	return u
}

// testCA makes a throw-away CA and a server certificate it signs for
// names, and writes the CA's certificate (PEM) to caFile, readable by the
// sandbox's user uid. The server certificate's organization is tag, which
// a client can look for to see that it got this very certificate.
func testCA(t *testing.T, caFile string, uid int, tag string, names ...string) *tls.Config {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "hutch escape test CA " + tag},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: names[0], Organization: []string{tag}},
		DNSNames:     names,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, caFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})), 0o644, uid)
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER, caDER}, PrivateKey: key}},
		MinVersion:   tls.VersionTLS12,
	}
}

// event is one line of hutch's --report.
type event struct {
	Time        time.Time `json:"time"`
	Sandbox     string    `json:"sandbox"`
	Action      string    `json:"action"`
	Protocol    string    `json:"protocol"`
	Host        string    `json:"host"`
	Port        int       `json:"port"`
	Address     string    `json:"address"`
	Rule        string    `json:"rule"`
	Reason      string    `json:"reason"`
	Secret      string    `json:"secret,omitempty"`
	Connections int64     `json:"connections"`
	BytesOut    int64     `json:"bytes_out"`
	BytesIn     int64     `json:"bytes_in"`
	// An approval's decision (Action "approval").
	Kind     string `json:"kind,omitempty"`
	Subject  string `json:"subject,omitempty"`
	Decision string `json:"decision,omitempty"`
	By       string `json:"by,omitempty"`
	Answer   string `json:"answer,omitempty"`
}

func (e event) String() string {
	b, _ := json.Marshal(e)
	return string(b)
}

// readReport parses the report file; a line that is not a JSON event, or
// an event without time, sandbox or action, fails the test.
func readReport(t *testing.T, path string) []event {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the report: %v", err)
	}
	var evs []event
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var e event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("report line %d is not JSON (%v): %s", i+1, err, line)
		}
		if e.Time.IsZero() || e.Sandbox == "" || !slices.Contains([]string{"blocked", "allowed", "lookup", "approval"}, e.Action) {
			t.Errorf("report line %d lacks time, sandbox or a known action: %s", i+1, line)
		}
		evs = append(evs, e)
	}
	return evs
}

func reportText(evs []event) string {
	var b strings.Builder
	for _, e := range evs {
		b.WriteString(e.String() + "\n")
	}
	return b.String()
}

// findEvent returns the first event of evs with action, protocol (any
// protocol when ""), host and port.
func findEvent(evs []event, action, protocol, host string, port int) (event, bool) {
	for _, e := range evs {
		if e.Action == action && (protocol == "" || e.Protocol == protocol) && e.Host == host && e.Port == port {
			return e, true
		}
	}
	return event{}, false
}

// blockedWant is one refusal the report must hold.
type blockedWant struct {
	protocol, host string
	port           int
	reason         []string // the reason contains one of these
}

// expectReport checks that the report holds a "blocked" event for each of
// blocked, with the reason, and an "allowed" event with connections and
// bytes both ways for each "host:port" of allowed.
func expectReport(t *testing.T, evs []event, blocked []blockedWant, allowed map[string]int) {
	t.Helper()
	for _, w := range blocked {
		e, ok := findEvent(evs, "blocked", w.protocol, w.host, w.port)
		if !ok {
			t.Errorf("report: no blocked %s event for %s:%d\n%s", w.protocol, w.host, w.port, reportText(evs))
			continue
		}
		if !slices.ContainsFunc(w.reason, func(r string) bool { return strings.Contains(e.Reason, r) }) {
			t.Errorf("report: blocked %s:%d for reason %q, want one mentioning %q", w.host, w.port, e.Reason, w.reason)
		}
	}
	for _, host := range sortedKeys(allowed) {
		e, ok := findEvent(evs, "allowed", "", host, allowed[host])
		if !ok {
			t.Errorf("report: no allowed event for %s:%d\n%s", host, allowed[host], reportText(evs))
			continue
		}
		if e.Connections < 1 || e.BytesOut <= 0 || e.BytesIn <= 0 {
			t.Errorf("report: allowed event for %s:%d lacks its traffic: %s", host, allowed[host], e)
		}
	}
}

// curlFn is a shell function for scripts: `try NAME CURL-ARGS...` runs
// curl and prints "CURL NAME rc=RC code=HTTP/CONNECT blocked=REASON
// body=BODY" (REASON from an X-Hutch-Blocked header; spaces as
// underscores), keeping curl's stderr in /tmp/e.NAME.
const curlFn = `
try() {
	name=$1; shift
	code=$(curl -sS --max-time 60 -D /tmp/h.$name -o /tmp/b.$name -w '%{http_code}/%{http_connect}' "$@" 2>/tmp/e.$name)
	rc=$?
	blocked=$(tr -d '\r' </tmp/h.$name 2>/dev/null | grep -i '^x-hutch-blocked:' | head -n1 | cut -d: -f2- | sed 's/^ *//' | tr ' ' '_')
	body=$(head -c 100 /tmp/b.$name 2>/dev/null | tr -c 'A-Za-z0-9._/:=-' '_')
	echo "CURL $name rc=$rc code=$code blocked=$blocked body=$body"
}
`

// curls parses the lines printed by try: NAME → field → value.
func curls(out string) map[string]map[string]string {
	m := map[string]map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "CURL" {
			continue
		}
		kv := map[string]string{}
		for _, w := range f[2:] {
			k, v, _ := strings.Cut(w, "=")
			kv[k] = v
		}
		m[f[1]] = kv
	}
	return m
}

// exchange is one request as a recording upstream received it.
type exchange struct {
	method, path, query string // the query as sent, still escaped
	header              http.Header
	basic               string // user:password of Basic authorization, decoded
	body                string // as far as it arrived
	bodyErr             error  // why the body ended early, if it did
}

func (x exchange) String() string {
	var h strings.Builder
	for _, k := range sortedKeys(x.header) {
		for _, v := range x.header[k] {
			fmt.Fprintf(&h, "%s: %s\n", k, v)
		}
	}
	body := x.body
	if len(body) > 200 {
		body = body[:100] + "…" + body[len(body)-100:]
	}
	return fmt.Sprintf("%s %s?%s\n%sbasic=%s\nbody (%d bytes, err %v)=%s", x.method, x.path, x.query, h.String(), x.basic, len(x.body), x.bodyErr, body)
}

// recorder is an upstream that keeps every request whole (header, query,
// body) and echoes it back, as an API that quotes the credentials it got
// would. Every response also carries leak, in its header (X-Leak) and its
// body: the real values that an upstream may send back unasked.
type recorder struct {
	*upstream
	leak string
	rmu  sync.Mutex
	reqs []exchange
}

// startRecorder serves HTTP on addr, or HTTPS when cfg is not nil. A
// request is recorded as "METHOD PATH" (for sameSet) and whole; the answer
// is 200 with X-Echo-Auth (the Authorization header, or the decoded
// credentials of Basic authorization), X-Leak, and a body that repeats
// the request line by line. Requests under /git/ without credentials get
// 401 with a Basic challenge, as a git server answers.
func startRecorder(t *testing.T, addr string, cfg *tls.Config, leak string) *recorder {
	t.Helper()
	l, u := listenUpstream(t, addr)
	rec := &recorder{upstream: u, leak: leak}
	var ln net.Listener = l
	if cfg != nil {
		ln = tls.NewListener(l, cfg)
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(rec.serve),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return rec
}

func (rec *recorder) serve(w http.ResponseWriter, r *http.Request) {
	rec.record(r.Method + " " + r.URL.Path)
	x := exchange{method: r.Method, path: r.URL.Path, query: r.URL.RawQuery, header: r.Header.Clone()}
	if user, pass, ok := r.BasicAuth(); ok {
		x.basic = user + ":" + pass
	}
	b, err := io.ReadAll(r.Body)
	x.body, x.bodyErr = string(b), err
	rec.rmu.Lock()
	rec.reqs = append(rec.reqs, x)
	rec.rmu.Unlock()
	auth := r.Header.Get("Authorization")
	if x.basic != "" {
		auth = "basic " + x.basic // decoded: the sandbox should see its placeholder here
	}
	if strings.HasPrefix(r.URL.Path, "/git/") && auth == "" {
		w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	w.Header().Set("X-Echo-Auth", auth)
	if rec.leak != "" {
		w.Header().Set("X-Leak", rec.leak)
	}
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintf(w, "echo path=%s\necho query=%s\necho auth=%s\necho body=%s\necho leak=%s\n", x.path, x.query, auth, x.body, rec.leak)
}

// requests returns the requests received for path, in order.
func (rec *recorder) requests(path string) []exchange {
	rec.rmu.Lock()
	defer rec.rmu.Unlock()
	var out []exchange
	for _, x := range rec.reqs {
		if x.path == path {
			out = append(out, x)
		}
	}
	return out
}

// dump returns everything the upstream received, as text.
func (rec *recorder) dump() string {
	rec.rmu.Lock()
	defer rec.rmu.Unlock()
	var b strings.Builder
	for _, x := range rec.reqs {
		b.WriteString(x.String() + "\n")
	}
	return b.String()
}
