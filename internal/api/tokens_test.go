package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestCreateToken: the operator (the unix socket, no token) makes tokens
// through the API, plain or E2B-shaped, and each acts as its tenant;
// nobody else may, not even with a tenant's token on the socket; bad
// tenant names are refused; every call is audited with the tenant it was
// for, never with the token.
func TestCreateToken(t *testing.T) {
	t.Parallel()
	e, path := newAuditedEnv(t, OriginLocal)

	resp, data := e.request(t, "POST", "/v1/tokens", `{"tenant":"alice"}`)
	want(t, resp, data, 201, "")
	var got TokenResult
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got.Tenant != "alice" || !strings.HasPrefix(got.Token, "hutch_") {
		t.Fatalf("answer %s", data)
	}
	if tenant, err := e.m.Store().TenantForToken(context.Background(), got.Token); err != nil || tenant != "alice" {
		t.Errorf("the token acts as %q, %v; want alice", tenant, err)
	}
	resp, data = e.request(t, "POST", "/v1/tokens", `{"tenant":"bob","e2b":true}`)
	want(t, resp, data, 201, "")
	var e2b TokenResult
	if err := json.Unmarshal(data, &e2b); err != nil || !strings.HasPrefix(e2b.Token, "e2b_") || len(e2b.Token) != 44 {
		t.Errorf("e2b token: %s, %v", data, err)
	}

	// A tenant's token, even on the socket, makes no tokens.
	resp, data = e.request(t, "POST", "/v1/tokens", `{"tenant":"mallory"}`, "Authorization", "Bearer "+got.Token)
	want(t, resp, data, 403, CodePermissionDenied, "operator")
	for _, body := range []string{`{"tenant":""}`, `{"tenant":"a b"}`, `{"tenant":"admin"}`, `{"tenant":"x","extra":1}`, ``} {
		resp, data = e.request(t, "POST", "/v1/tokens", body)
		want(t, resp, data, 400, CodeInvalid)
	}

	// Over TCP, with or without a token: 401 without, 403 with.
	remote := newEnv(t, Config{}, OriginRemote)
	tok, err := remote.m.Store().CreateToken(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	resp, data = remote.request(t, "POST", "/v1/tokens", `{"tenant":"alice"}`)
	want(t, resp, data, 401, CodeUnauthorized)
	resp, data = remote.request(t, "POST", "/v1/tokens", `{"tenant":"alice"}`, "Authorization", "Bearer "+tok)
	want(t, resp, data, 403, CodePermissionDenied)

	// Audited: two made, one refused, four invalid.
	var entries []audit.Entry
	testutil.Eventually(time.Minute, func() bool {
		raw, _ := os.ReadFile(path)
		entries = nil
		sc := bufio.NewScanner(bytes.NewReader(raw))
		for sc.Scan() {
			var en audit.Entry
			if err := json.Unmarshal(sc.Bytes(), &en); err != nil {
				t.Fatal(err)
			}
			entries = append(entries, en)
		}
		return len(entries) == 8
	})
	if len(entries) != 8 {
		t.Fatalf("%d audit entries, want 8: %+v", len(entries), entries)
	}
	raw, _ := os.ReadFile(path)
	for _, secret := range []string{got.Token, e2b.Token} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("the audit log holds a token")
		}
	}
	if en := entries[0]; en.Action != "create_token" || en.Tenant != AdminTenant || en.Subject != "alice" || en.Error != "" {
		t.Errorf("first entry: %+v", en)
	}
	if en := entries[2]; en.Action != "create_token" || en.Tenant != "alice" || en.Error != CodePermissionDenied {
		t.Errorf("refused entry: %+v", en)
	}
}
