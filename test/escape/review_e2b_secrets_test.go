//go:build linux

package escape

import (
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestItem19_E2BSecretRules (escape items 19, 29 and 30, for E2B's
// secrets given to a sandbox by network.rules transforms): the real
// value goes only where the rule that names it points, in the header it
// names. The sandbox holds a placeholder only, and sees the value echoed
// back as that placeholder; its placeholder sent to another allowed host
// stays a placeholder; a rule added later (updateNetwork) cannot send the
// secret to another host; another tenant naming the secret, by id or by
// name, never gets it; a value with a line break cannot add a header.
func TestItem19_E2BSecretRules(t *testing.T) {
	forEachServedTier(t, func(t *testing.T, tier []string) {
		type seen struct {
			port string
			h    http.Header
		}
		var mu sync.Mutex
		var got []seen
		up := testutil.NewServerTLS(t, "127.0.0.1")
		caFile := filepath.Join(hostDir(t, 0, "e2bsecret"), "ca.pem")
		if err := os.WriteFile(caFile, up.CAPEM, 0o644); err != nil {
			t.Fatal(err)
		}
		ports := make([]string, 2)
		for i := range ports {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			_, port, _ := net.SplitHostPort(l.Addr().String())
			ports[i] = port
			srv := &http.Server{
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					mu.Lock()
					got = append(got, seen{port, r.Header.Clone()})
					mu.Unlock()
					_ = json.NewEncoder(w).Encode(r.Header)
				}),
				TLSConfig: &tls.Config{Certificates: []tls.Certificate{up.Cert}},
			}
			go func() { _ = srv.ServeTLS(l, "", "") }()
			t.Cleanup(func() { srv.Close() })
		}
		vault, other := "127.0.0.1:"+ports[0], "127.0.0.1:"+ports[1]
		last := func(port string) http.Header {
			mu.Lock()
			defer mu.Unlock()
			for i := len(got) - 1; i >= 0; i-- {
				if got[i].port == port {
					return got[i].h
				}
			}
			return nil
		}

		d := startServed(t, "", true, append(slices.Clone(tier), "--allow-private", "127.0.0.1/32", "--upstream-ca", caFile)...)
		alice, bob := d.token(t, "alice"), d.token(t, "bob")
		real := randomName("AliceRealValue")
		st, out := d.do(t, alice, "POST", "/secrets", `{"name":"vault","value":"`+real+`"}`)
		var sec struct{ SecretID string }
		if st != http.StatusCreated || json.Unmarshal([]byte(out), &sec) != nil {
			t.Fatalf("alice's secret: %d %s", st, out)
		}
		bobs := randomName("BobValue")
		if st, out := d.do(t, bob, "POST", "/secrets", `{"name":"vault","value":"`+bobs+`"}`); st != http.StatusCreated {
			t.Fatalf("bob's secret: %d %s", st, out)
		}
		rules := func(host, value string) string {
			return `"rules":{"` + host + `":[{"transform":{"headers":{"Authorization":"` + value + `"}}}]}`
		}
		create := func(token, network string) (int, string) {
			return d.do(t, token, "POST", "/sandboxes", `{"templateID":"base","network":{"allowOut":["`+vault+`","`+other+`"],`+network+`}}`)
		}
		sandboxOf := func(out string) string {
			var sb struct{ SandboxID string }
			if json.Unmarshal([]byte(out), &sb) != nil || sb.SandboxID == "" {
				t.Fatalf("create: %s", out)
			}
			return sb.SandboxID
		}

		// Bob naming alice's secret by its id: refused, nothing made.
		st, out = create(bob, rules(vault, "Bearer ${e2b.secrets."+sec.SecretID+"}"))
		refused(t, "bob naming alice's secret by id", st, out, sec.SecretID)
		// Bob naming "vault" gets his own.
		st, out = create(bob, rules(vault, "Bearer ${e2b.secrets.vault}"))
		if st != http.StatusCreated {
			t.Fatalf("bob's sandbox: %d %s", st, out)
		}
		bobSbx := sandboxOf(out)
		if _, _, code, _ := d.runIn(t, bob, bobSbx, `curl -sS --noproxy '' --max-time 20 https://`+vault+`/`); code != 0 {
			t.Fatalf("bob's request: exit %d", code)
		}
		if a := last(ports[0]).Get("Authorization"); a != "Bearer "+bobs {
			t.Errorf("bob's request carried %q, want his own secret", a)
		}

		// A line break in a value is not a second header.
		st, out = create(alice, rules(vault, `x\r\nX-Injected: 1`))
		refused(t, "a header value with a line break", st, out, "line break")

		st, out = create(alice, rules(vault, "Bearer ${e2b.secrets.vault}"))
		if st != http.StatusCreated {
			t.Fatalf("alice's sandbox: %d %s", st, out)
		}
		id := sandboxOf(out)
		script := `echo "ph=$E2B_SECRET_VAULT"
curl -sS --noproxy '' --max-time 20 https://` + vault + `/
curl -sSk --noproxy '' --max-time 20 -H "Authorization: Bearer $E2B_SECRET_VAULT" https://` + other + `/
env; cat /proc/self/environ | tr '\0' '\n'`
		stdout, stderr, code, ok := d.runIn(t, alice, id, script)
		if !ok || code != 0 {
			t.Fatalf("alice's requests: exit %d %s %s", code, stdout, stderr)
		}
		if strings.Contains(stdout+stderr, real) {
			t.Errorf("the sandbox saw the real value:\n%s%s", stdout, stderr)
		}
		if a := last(ports[0]).Get("Authorization"); a != "Bearer "+real {
			t.Errorf("the rule's host got %q, want the real value", a)
		}
		if a := last(ports[1]).Get("Authorization"); strings.Contains(a, real) || !strings.HasPrefix(a, "Bearer ") {
			t.Errorf("another allowed host got %q: the placeholder must stay a placeholder there", a)
		}

		// The secret cannot follow a rule to another host later.
		st, out = d.do(t, alice, "PUT", "/sandboxes/"+id+"/network", `{"allowOut":["`+vault+`","`+other+`"],`+rules(other, "Bearer ${e2b.secrets.vault}")+`}`)
		refused(t, "a later rule sending the secret to another host", st, out, "not bound")
		if _, _, code, _ := d.runIn(t, alice, id, `curl -sSk --noproxy '' --max-time 20 https://`+other+`/`); code != 0 {
			t.Fatalf("request after the refused update: exit %d", code)
		}
		if a := last(ports[1]).Get("Authorization"); a != "" {
			t.Errorf("after the refused update another host got Authorization %q", a)
		}
		if strings.Contains(d.logText(), real) {
			t.Error("the daemon's log holds the real value")
		}
	})
}
