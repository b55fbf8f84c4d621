//go:build linux

package escape

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestItem30_SignedFileURLs (escape item 30's class "a front end that
// lets a request through on less than the sandbox's credential", for
// envd's signed file URLs: E2B's downloadUrl and uploadUrl): a signature
// made with a sandbox's envd access token lets a request of /files in
// without the token for that sandbox, path, operation and user only, and
// until its expiry. The same URL naming another sandbox (alice's other
// one, or bob's with a signature of his own sandbox), another path,
// operation or user, a later expiry, or used after it expired, or once
// the sandbox is gone, is refused with 401 and leaves the files as they
// were; an unsigned request without the token is refused; a signature
// grants nothing but /files. The valid URL, in the same sandboxes, is the
// control.
func TestItem30_SignedFileURLs(t *testing.T) {
	forEachServedTier(t, func(t *testing.T, tier []string) {
		d := startServed(t, "", true, tier...)
		alice, bob := d.token(t, "alice"), d.token(t, "bob")
		type box struct{ id, token string }
		open := func(token string) box {
			t.Helper()
			id := d.create(t, token, `{}`)
			status, out := d.do(t, token, "POST", "/sandboxes/"+id+"/connect", `{"timeout":300}`)
			var sb struct{ EnvdAccessToken string }
			if status/100 != 2 || json.Unmarshal([]byte(out), &sb) != nil || sb.EnvdAccessToken == "" {
				t.Fatalf("connect %s: %d %s", id, status, out)
			}
			return box{id, sb.EnvdAccessToken}
		}
		a, a2, b := open(alice), open(alice), open(bob)
		client := &http.Client{Timeout: 120 * time.Second}
		files := func(method, query string, header map[string]string, body string) (int, string) {
			t.Helper()
			req, err := http.NewRequest(method, d.url+"/files?"+query, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/octet-stream")
			for k, v := range header {
				req.Header.Set(k, v)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			out, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(out)
		}
		write := func(s box, path, content string) {
			t.Helper()
			q := url.Values{"path": {path}, "username": {"root"}}.Encode()
			if status, out := files("POST", q, map[string]string{"E2b-Sandbox-Id": s.id, "X-Access-Token": s.token}, content); status != http.StatusOK {
				t.Fatalf("write %s in %s: %d %s", path, s.id, status, out)
			}
		}
		read := func(s box, path string) string {
			t.Helper()
			q := url.Values{"path": {path}, "username": {"root"}}.Encode()
			status, out := files("GET", q, map[string]string{"E2b-Sandbox-Id": s.id, "X-Access-Token": s.token}, "")
			if status != http.StatusOK {
				t.Fatalf("read %s in %s: %d %s", path, s.id, status, out)
			}
			return out
		}
		// signed is the query of a URL signed as E2B's SDKs sign it.
		signed := func(path, op, user, token string, exp int64) url.Values {
			raw := path + ":" + op + ":" + user + ":" + token
			q := url.Values{"path": {path}}
			if user != "" {
				q.Set("username", user)
			}
			if exp != 0 {
				e := strconv.FormatInt(exp, 10)
				raw += ":" + e
				q.Set("signature_expiration", e)
			}
			sum := sha256.Sum256([]byte(raw))
			q.Set("signature", "v1_"+base64.RawStdEncoding.EncodeToString(sum[:]))
			return q
		}
		write(a, "/tmp/f.txt", "alice's")
		write(a, "/tmp/g.txt", "alice's other")
		write(a2, "/tmp/f.txt", "alice's second sandbox")
		write(b, "/tmp/f.txt", "bob's")

		exp := time.Now().Unix() + 600
		good := signed("/tmp/f.txt", "read", "root", a.token, exp)
		// Control: the URL as signed.
		if status, out := files("GET", good.Encode(), nil, ""); status != http.StatusOK || out != "alice's" {
			t.Fatalf("control: the signed URL: %d %q", status, out)
		}
		with := func(q url.Values, k, v string) string {
			c := url.Values{}
			for kk, vv := range q {
				c[kk] = vv
			}
			if v == "" {
				c.Del(k)
			} else {
				c.Set(k, v)
			}
			return c.Encode()
		}
		for _, tc := range []struct {
			what, method, query string
			header              map[string]string
			msg                 string
		}{
			{"naming alice's other sandbox", "GET", good.Encode(), map[string]string{"E2b-Sandbox-Id": a2.id}, "invalid signature"},
			{"naming alice's other sandbox by host", "GET", good.Encode(), map[string]string{"Host": "49983-" + a2.id + ".hutch.test"}, "invalid signature"},
			{"bob's signature naming alice's sandbox", "GET", signed("/tmp/f.txt", "read", "root", b.token, exp).Encode(), map[string]string{"E2b-Sandbox-Id": a.id}, "invalid signature"},
			{"another path", "GET", with(good, "path", "/tmp/g.txt"), nil, "invalid signature"},
			{"another path spelled differently", "GET", with(good, "path", "/tmp/../tmp/g.txt"), nil, "invalid signature"},
			{"another operation", "POST", good.Encode(), nil, "invalid signature"},
			{"another user", "GET", with(good, "username", "user"), nil, "invalid signature"},
			{"no user", "GET", with(good, "username", ""), nil, "invalid signature"},
			{"a later expiry", "GET", with(good, "signature_expiration", strconv.FormatInt(exp+3600, 10)), nil, "invalid signature"},
			{"no expiry", "GET", with(good, "signature_expiration", ""), nil, "invalid signature"},
			{"expired", "GET", signed("/tmp/f.txt", "read", "root", a.token, time.Now().Unix()-1).Encode(), nil, "signature is already expired"},
			{"unsigned", "GET", with(good, "signature", ""), nil, ""},
			{"unsigned, naming the sandbox", "GET", with(good, "signature", ""), map[string]string{"E2b-Sandbox-Id": a.id}, ""},
		} {
			if h := tc.header["Host"]; h != "" {
				// net/http takes the host from the request, not a header.
				req, _ := http.NewRequest(tc.method, d.url+"/files?"+tc.query, nil)
				req.Host = h
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				out, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(out), tc.msg) {
					t.Errorf("%s: %d %s, want 401 %q", tc.what, resp.StatusCode, out, tc.msg)
				}
				continue
			}
			status, out := files(tc.method, tc.query, tc.header, "overwritten")
			if status != http.StatusUnauthorized || !strings.Contains(out, tc.msg) {
				t.Errorf("%s: %d %s, want 401 %q", tc.what, status, out, tc.msg)
			}
		}
		// A signature grants /files only: not a Connect call.
		req, _ := http.NewRequest("POST", d.url+"/filesystem.Filesystem/ListDir?"+good.Encode(), strings.NewReader(`{"path":"/tmp"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("E2b-Sandbox-Id", a.id)
		if resp, err := client.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("a signed Connect call: %v, %v", resp, err)
		} else {
			resp.Body.Close()
		}
		for s, want := range map[box]string{a: "alice's", a2: "alice's second sandbox", b: "bob's"} {
			if got := read(s, "/tmp/f.txt"); got != want {
				t.Errorf("%s's /tmp/f.txt after the refused requests: %q, want %q", s.id, got, want)
			}
		}
		if got := read(a, "/tmp/g.txt"); got != "alice's other" {
			t.Errorf("/tmp/g.txt after the refused requests: %q", got)
		}
		// Once the sandbox is gone, its signatures open nothing.
		if status, out := d.do(t, alice, "DELETE", "/sandboxes/"+a.id, ""); status/100 != 2 {
			t.Fatalf("kill %s: %d %s", a.id, status, out)
		}
		if status, out := files("GET", good.Encode(), nil, ""); status == http.StatusOK {
			t.Errorf("the signed URL of a killed sandbox: %d %q", status, out)
		}
	})
}
