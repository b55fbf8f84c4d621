package e2b

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/policy"
)

// TestApplyRules maps E2B's network.rules onto header rules and secrets:
// text escaped, secrets bound to the hosts that name them, hosts not
// allowed by allowOut denied, nothing for an offline sandbox.
func TestApplyRules(t *testing.T) {
	store := map[string]string{"openai-key": "sk-real-1", "gh": "ghp-real-2", "a_b": "x", "a-b": "y"}
	lookup := func(ref string) (string, string, error) {
		if v, ok := store[strings.ToLower(ref)]; ok {
			return strings.ToLower(ref), v, nil
		}
		return "", "", errorf(daemon.ErrInvalid, "secret %q: not found", ref)
	}
	rules := json.RawMessage(`{
		"api.openai.com": [{"transform": {"headers": {"authorization": "Bearer ${e2b.secrets.openai-key}", "x-cost": "$5"}}}],
		"API.github.com": [{"transform": {"headers": {"Authorization": "token ${e2b.secrets.gh}"}}}, {"transform": {"headers": {"X-Also": "${e2b.secrets.openai-key}"}}}],
		"plain.example": [{}, {"transform": {"headers": {"X-Team": "a"}}}]
	}`)
	nw := policy.Network{Mode: "proxy", AllowedDomains: []string{"api.openai.com", "*.github.com"}}
	secs, values, err := applyRules(&nw, rules, lookup)
	if err != nil {
		t.Fatal(err)
	}
	wantHeaders := []policy.HeaderRule{
		{Host: "api.github.com", Set: map[string]string{"Authorization": "token ${secrets.E2B_SECRET_GH}", "X-Also": "${secrets.E2B_SECRET_OPENAI_KEY}"}},
		{Host: "api.openai.com", Set: map[string]string{"Authorization": "Bearer ${secrets.E2B_SECRET_OPENAI_KEY}", "X-Cost": "$$5"}},
		{Host: "plain.example", Set: map[string]string{"X-Team": "a"}},
	}
	if !reflect.DeepEqual(nw.Headers, wantHeaders) {
		t.Errorf("headers = %+v\nwant %+v", nw.Headers, wantHeaders)
	}
	wantSecrets := []policy.Secret{
		{Name: "E2B_SECRET_GH", Hosts: []string{"api.github.com"}, From: policy.SecretFromRequest},
		{Name: "E2B_SECRET_OPENAI_KEY", Hosts: []string{"api.github.com", "api.openai.com"}, From: policy.SecretFromRequest},
	}
	if !reflect.DeepEqual(secs, wantSecrets) {
		t.Errorf("secrets = %+v\nwant %+v", secs, wantSecrets)
	}
	if len(values) != 2 || string(values["E2B_SECRET_GH"].Bytes()) != "ghp-real-2" || string(values["E2B_SECRET_OPENAI_KEY"].Bytes()) != "sk-real-1" {
		t.Errorf("values = %v", values)
	}
	// allowOut does not cover plain.example: named in rules, it stays
	// out, as in E2B.
	if !reflect.DeepEqual(nw.DeniedDomains, []string{"plain.example"}) {
		t.Errorf("denied = %v, want [plain.example]", nw.DeniedDomains)
	}
	// The result is a valid policy.
	spec := policy.Spec{Network: nw, Secrets: secs}
	if err := spec.Normalize("/w", ""); err != nil {
		t.Errorf("the policy made of the rules: %v", err)
	}

	// With the internet open, nothing is denied.
	open := policy.Network{Mode: "proxy", AllowedDomains: []string{"*"}}
	if _, _, err := applyRules(&open, rules, lookup); err != nil || len(open.DeniedDomains) != 0 {
		t.Errorf("open network: denied %v, %v", open.DeniedDomains, err)
	}
	// Offline: nothing at all.
	off := policy.Network{Mode: "none"}
	if s, v, err := applyRules(&off, rules, lookup); err != nil || s != nil || v != nil || off.Headers != nil {
		t.Errorf("offline: %v %v %v %v", s, v, off.Headers, err)
	}

	for raw, want := range map[string]string{
		`{"a.example":[{"transform":{"headers":{"A":"${e2b.secrets.nope}"}}}]}`:                         "secret \"nope\": not found",
		`{"a.example":[{"transform":{"headers":{"A":"${e2b.secrets.a_b}","B":"${e2b.secrets.a-b}"}}}]}`: "would both be E2B_SECRET_A_B",
		`{"a.example":[{"transform":{"headers":{"A":"${e2b.other}"}}}]}`:                                "not a placeholder hutch knows",
		`{"a.example":[{"transform":{"headers":{"A":"${e2b.secrets.gh"}}}]}`:                            "not a placeholder hutch knows",
		`{"a.example":[{"transform":{"headers":{"Bad Name":"x"}}}]}`:                                    "invalid header name",
		`{"a.example":[{"transform":{"headers":{"Transfer-Encoding":"chunked"}}}]}`:                     "belongs to the connection",
		`{"a.example:*":[{"transform":{"headers":{"A":"b"}}}]}`:                                         "every port",
	} {
		nw := policy.Network{Mode: "proxy", AllowedDomains: []string{"*"}}
		_, _, err := applyRules(&nw, json.RawMessage(raw), lookup)
		if err == nil || !strings.Contains(err.Error(), want) || classify(err) != http.StatusBadRequest {
			t.Errorf("applyRules(%s) = %v (status %d), want 400 naming %q", raw, err, classify(err), want)
		}
	}
	// Without a store (a template build), a secret is refused.
	nw = policy.Network{Mode: "proxy", AllowedDomains: []string{"*"}}
	if _, _, err := applyRules(&nw, json.RawMessage(`{"a.example":[{"transform":{"headers":{"A":"${e2b.secrets.gh}"}}}]}`), nil); err == nil || !slices.Contains([]int{400}, classify(err)) {
		t.Errorf("no lookup: %v", err)
	}
}
