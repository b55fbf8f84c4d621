package egress

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/secrets"
)

// TestHeaderRules: the proxy sets a rule's headers on the HTTPS requests
// to its host only, replacing the sandbox's own, a secret's real value
// where the rule names it (redacted in what comes back); other hosts get
// nothing; a change of rules applies to the next request.
func TestHeaderRules(t *testing.T) {
	pki := newTestPKI(t)
	bound := startRecUpstream(t, pki, false, realToken)
	other := startRecUpstream(t, pki, false, realToken)
	tok := newSecret(t, "API_TOKEN", realToken, fmt.Sprintf("bound.test:%d", bound.port))
	boundHost := fmt.Sprintf("bound.test:%d", bound.port)
	hs, err := HeaderRules([]policy.HeaderRule{
		{Host: boundHost, Set: map[string]string{"authorization": "Bearer ${secrets.API_TOKEN}", "X-Cost": "$$5"}},
	}, []*secrets.Secret{tok})
	if err != nil {
		t.Fatal(err)
	}
	cfg := secretConfig([]*secrets.Secret{tok}, fmt.Sprintf("other.test:%d", other.port))
	cfg.Headers = hs
	env := startSecretProxy(t, cfg, pki.pool)
	client := env.client(env.caPool)

	req := mustRequest(t, "GET", "https://"+boundHost+"/x")
	req.Header.Set("X-Cost", "mine")
	req.Header.Set("Authorization", "Bearer forged")
	resp, body := do(t, client, req)
	mustOK(t, resp, body)
	got := bound.last(t)
	if a := got.Header.Values("Authorization"); len(a) != 1 || a[0] != "Bearer "+realToken {
		t.Errorf("the upstream got Authorization %q, want the secret's real value alone", a)
	}
	if c := got.Header.Values("X-Cost"); len(c) != 1 || c[0] != "$5" {
		t.Errorf("the upstream got X-Cost %q, want the rule's $5 alone", c)
	}
	if strings.Contains(body, realToken) || resp.Header.Get("X-Echo-Auth") != "Bearer "+tok.Placeholder {
		t.Errorf("the client got the echo %q (body %s), want the placeholder", resp.Header.Get("X-Echo-Auth"), body)
	}

	// Another host: tunneled, untouched.
	resp, body = do(t, env.client(pki.pool), mustRequest(t, "GET", fmt.Sprintf("https://other.test:%d/", other.port)))
	mustOK(t, resp, body)
	if a := other.last(t).Header.Get("Authorization"); a != "" {
		t.Errorf("other.test got Authorization %q", a)
	}

	// New rules without headers: the next request gets none.
	cfg.Headers = nil
	rules, err := NewRules(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.p.SetRules(rules); err != nil {
		t.Fatal(err)
	}
	resp, body = do(t, env.client(env.caPool), mustRequest(t, "GET", "https://"+boundHost+"/y"))
	mustOK(t, resp, body)
	if h := bound.last(t).Header; h.Get("Authorization") != "" || h.Get("X-Cost") != "" {
		t.Errorf("after the rules went: %v", h)
	}
}

// TestHeaderRulesAlone: rules without any secret make the proxy intercept
// their host too.
func TestHeaderRulesAlone(t *testing.T) {
	pki := newTestPKI(t)
	up := startRecUpstream(t, pki, false, realToken)
	host := fmt.Sprintf("bound.test:%d", up.port)
	hs, err := HeaderRules([]policy.HeaderRule{{Host: host, Set: map[string]string{"X-Team": "a"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := secretConfig(nil, host)
	cfg.Headers = hs
	env := startSecretProxy(t, cfg, pki.pool)
	resp, body := do(t, env.client(env.caPool), mustRequest(t, "GET", "https://"+host+"/"))
	mustOK(t, resp, body)
	if v := up.last(t).Header.Get("X-Team"); v != "a" {
		t.Errorf("X-Team = %q, want a", v)
	}
}

// TestHeaderRulesRefused: a rule may name only a secret bound to its host,
// and never every host or port.
func TestHeaderRulesRefused(t *testing.T) {
	tok := newSecret(t, "T", realToken, "api.example")
	for _, c := range []struct {
		rule policy.HeaderRule
		want string
	}{
		{policy.HeaderRule{Host: "other.example", Set: map[string]string{"A": "${secrets.T}"}}, "secret T is not bound to other.example"},
		{policy.HeaderRule{Host: "api.example", Set: map[string]string{"A": "${secrets.U}"}}, "the sandbox has no secret U"},
		{policy.HeaderRule{Host: "api.example", Set: map[string]string{"A": "$x"}}, `"$" starts`},
	} {
		if _, err := HeaderRules([]policy.HeaderRule{c.rule}, []*secrets.Secret{tok}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("HeaderRules(%+v) = %v, want %q", c.rule, err, c.want)
		}
	}
	for host, want := range map[string]string{"*": "every request", "a.example:*": "every port"} {
		cfg := testConfig()
		cfg.Headers = []HeaderRule{{Host: host, Set: []Header{{Name: http.CanonicalHeaderKey("a"), Value: "b"}}}}
		if _, err := NewRules(cfg); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewRules with a header rule for %s: %v, want %q", host, err, want)
		}
	}
}
