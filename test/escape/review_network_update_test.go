//go:build linux

package escape

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestItem26_UpdateNetwork: changing a running sandbox's egress rules is
// a policy change path, checked as a create is. A tenant cannot widen its
// sandbox beyond what the operator's rules allow — loopback, metadata,
// private ranges, the host's own addresses, allow_private, every host on
// a daemon run with --no-internet — through hutch's API or E2B's, and
// after every refusal the sandbox still reaches nothing it could not
// before. Another tenant's sandbox answers as an unknown id does, for its
// network and its metrics alike.
func TestItem26_UpdateNetwork(t *testing.T) {
	forEachServedTier(t, func(t *testing.T, tier []string) {
		web := startWeb(t, "127.0.0.1:0", nil)
		d := startServed(t, "", true, append(slices.Clone(tier), "--no-internet")...)
		alice, bob := d.token(t, "alice"), d.token(t, "bob")
		port := web.port
		id := d.create(t, alice, `{"policy":{"network":{"allowed_domains":["example.com"]}}}`)
		path := "/v1/sandboxes/" + id + "/network"

		for _, tc := range []struct {
			body, field string
		}{
			{`{"allowed_domains":["127.0.0.1:` + port + `"]}`, "network.allowed_domains[0]"},
			{`{"allowed_domains":["example.com","[::ffff:127.0.0.1]:` + port + `"]}`, "network.allowed_domains[1]"},
			{`{"allowed_domains":["localhost:` + port + `"]}`, "network.allowed_domains[0]"},
			{`{"allowed_domains":["169.254.169.254"]}`, "network.allowed_domains[0]"},
			{`{"allowed_cidrs":["127.0.0.0/8:` + port + `"]}`, "network.allowed_cidrs[0]"},
			{`{"allowed_cidrs":["10.0.0.0/8"]}`, "network.allowed_cidrs[0]"},
			{`{"allowed_domains":["up.test:` + port + `"],"hosts":["up.test:127.0.0.1"]}`, "network.hosts[0]"},
			{`{"allowed_domains":["*"]}`, "--no-internet"},
			{`{"allowed_domains":["*:` + port + `"]}`, "--no-internet"},
			{`{"mode":"host"}`, "network.mode"},
		} {
			status, out := d.do(t, alice, "PUT", path, tc.body)
			if status != http.StatusBadRequest && status != http.StatusForbidden || !strings.Contains(out, tc.field) {
				t.Errorf("PUT network %s: %d %s, want a refusal naming %s", tc.body, status, out, tc.field)
			}
		}
		if status, out := d.do(t, alice, "PUT", path, `{"allowed_domains":["*:`+port+`"],"allow_private":["127.0.0.1/32"]}`); status != http.StatusForbidden || !strings.Contains(out, "allow_private") {
			t.Errorf("PUT network with allow_private: %d %s, want 403 naming it", status, out)
		}
		for _, allow := range []string{"127.0.0.1", "169.254.169.254", "127.0.0.0/8", "*", "0.0.0.0/0"} {
			body, _ := json.Marshal(map[string]any{"allowOut": []string{allow}})
			if status, out := d.do(t, alice, "PUT", "/sandboxes/"+id+"/network", string(body)); status != http.StatusBadRequest || !strings.Contains(out, allow) {
				t.Errorf("E2B updateNetwork allowOut %s: %d %s, want 400 naming it", allow, status, out)
			}
		}

		// Nothing of it took: the sandbox reaches neither the host-only
		// server nor anything but its one host.
		probe := `curl -sS -o /dev/null --noproxy '' --proxy http://127.0.0.1:3128 --max-time 20 -w '%{http_code}' http://127.0.0.1:` + port + `/after-refusals`
		if out, _, _, _ := d.runIn(t, alice, id, probe); out != "403" {
			t.Errorf("after the refused updates the sandbox got %q from the host-only server, want 403", out)
		}
		if got := web.received(); len(got) != 0 {
			t.Errorf("the host-only server got requests from a tenant's sandbox: %q", got)
		}

		// Another tenant: the same 404 as an unknown sandbox.
		for _, c := range []struct{ method, path, body string }{
			{"PUT", "/v1/sandboxes/%s/network", `{"allowed_domains":["example.org"]}`},
			{"GET", "/v1/sandboxes/%s/metrics", ""},
			{"PUT", "/sandboxes/%s/network", `{"allowOut":["example.org"]}`},
			{"GET", "/sandboxes/%s/metrics", ""},
		} {
			theirs, theirsOut := d.do(t, bob, c.method, strings.Replace(c.path, "%s", id, 1), c.body)
			none, noneOut := d.do(t, bob, c.method, strings.Replace(c.path, "%s", "sb-a2a2a2a2a2a2", 1), c.body)
			if theirs != http.StatusNotFound || none != http.StatusNotFound ||
				strings.ReplaceAll(theirsOut, id, "ID") != strings.ReplaceAll(noneOut, "sb-a2a2a2a2a2a2", "ID") {
				t.Errorf("%s %s of alice's sandbox: %d %s; of none: %d %s; want the same 404", c.method, c.path, theirs, theirsOut, none, noneOut)
			}
		}
		if _, out := d.do(t, bob, "GET", "/sandboxes/metrics?sandbox_ids="+id, ""); strings.Contains(out, id) {
			t.Errorf("bob's metrics list shows alice's sandbox: %s", out)
		}
		// Alice's own rules are as she left them.
		if status, out := d.do(t, alice, "GET", "/v1/sandboxes/"+id+"/metrics", ""); status != http.StatusOK || !strings.Contains(out, `"samples"`) {
			t.Errorf("alice's metrics: %d %s", status, out)
		}
	})
}
