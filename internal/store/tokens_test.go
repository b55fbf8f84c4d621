package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
)

var tokenRE = regexp.MustCompile(`^hutch_[A-Za-z0-9_-]{43}$`)

func TestTokens(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)

	a1, err := s.CreateToken(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	a2, err := s.CreateToken(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	b1, err := s.CreateToken(ctx, "beta")
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{a1, a2, b1} {
		if !tokenRE.MatchString(tok) {
			t.Errorf("token %q has not the form hutch_ + 43 base64url characters", tok)
		}
	}
	if a1 == a2 {
		t.Fatal("two tokens are equal")
	}

	for tok, want := range map[string]string{a1: "acme", a2: "acme", b1: "beta"} {
		got, err := s.TenantForToken(ctx, tok)
		if err != nil || got != want {
			t.Errorf("TenantForToken(%q) = %q, %v; want %q", tok, got, err, want)
		}
	}

	for _, bad := range []string{
		"",
		"hutch_",
		a1[:len(a1)-1],
		a1 + "A",
		a1[:len(a1)-1] + string(a1[len(a1)-1]^1),
		"xxxxx_" + a1[6:],
	} {
		if got, err := s.TenantForToken(ctx, bad); !errors.Is(err, ErrNotFound) {
			t.Errorf("TenantForToken(%q) = %q, %v; want ErrNotFound", bad, got, err)
		}
	}

	if _, err := s.CreateToken(ctx, ""); err == nil {
		t.Error("CreateToken with an empty tenant succeeded")
	}

	n, err := s.RevokeTokens(ctx, "acme")
	if err != nil || n != 2 {
		t.Fatalf("RevokeTokens(acme) = %d, %v; want 2", n, err)
	}
	for _, tok := range []string{a1, a2} {
		if _, err := s.TenantForToken(ctx, tok); !errors.Is(err, ErrNotFound) {
			t.Errorf("revoked token: %v, want ErrNotFound", err)
		}
	}
	if got, err := s.TenantForToken(ctx, b1); err != nil || got != "beta" {
		t.Errorf("the other tenant's token after revoking acme's: %q, %v", got, err)
	}
	if n, err := s.RevokeTokens(ctx, "acme"); err != nil || n != 0 {
		t.Errorf("RevokeTokens again = %d, %v; want 0", n, err)
	}
}

// TestTokenNotInFile checks that no file of the store holds a token, while
// they do hold its hash (which shows the test reads the data).
func TestTokenNotInFile(t *testing.T) {
	ctx := context.Background()
	s, path := openTest(t)
	var tokens []string
	for range 20 {
		tok, err := s.CreateToken(ctx, "acme")
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, tok)
	}

	check := func(when string) {
		t.Helper()
		var all []byte
		for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
			b, err := os.ReadFile(path + suffix)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, b...)
		}
		for _, tok := range tokens {
			for _, part := range []string{tok, tok[len(tokenPrefix):], tok[len(tokenPrefix) : len(tokenPrefix)+16]} {
				if bytes.Contains(all, []byte(part)) {
					t.Fatalf("%s: the files hold %q of token %q", when, part, tok)
				}
			}
			if !bytes.Contains(all, TokenHash(tok)) {
				t.Fatalf("%s: the files do not hold the hash of a token", when)
			}
		}
	}
	check("open")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check("closed")
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got, err := s2.TenantForToken(ctx, tokens[0]); err != nil || got != "acme" {
		t.Fatalf("TenantForToken after reopen = %q, %v", got, err)
	}
}

var e2bTokenRE = regexp.MustCompile(`^e2b_[0-9a-f]{40}$`)

func TestE2BTokens(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	tok, err := s.CreateE2BToken(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if !e2bTokenRE.MatchString(tok) {
		t.Fatalf("token %q has not the form e2b_ + 40 hex digits", tok)
	}
	if got, err := s.TenantForToken(ctx, tok); err != nil || got != "acme" {
		t.Fatalf("TenantForToken(%q) = %q, %v; want acme", tok, got, err)
	}
	for _, bad := range []string{tok[:len(tok)-1], tok + "0", "e2b_" + tok[4:len(tok)-1] + "x", "hutch_" + tok[4:]} {
		if _, err := s.TenantForToken(ctx, bad); !errors.Is(err, ErrNotFound) {
			t.Errorf("TenantForToken(%q) = %v, want ErrNotFound", bad, err)
		}
	}
	if n, err := s.RevokeTokens(ctx, "acme"); err != nil || n != 1 {
		t.Fatalf("RevokeTokens = %d, %v; want 1", n, err)
	}
	if _, err := s.TenantForToken(ctx, tok); !errors.Is(err, ErrNotFound) {
		t.Fatalf("revoked token: %v, want ErrNotFound", err)
	}
}

// TestSocketTenantHasNoTokens: no token is made for the unix socket's
// tenant, and one an older hutch made does not authenticate, so that no
// request over TCP acts on the operator's sandboxes.
func TestSocketTenantHasNoTokens(t *testing.T) {
	s, path := openTest(t)
	ctx := context.Background()
	if _, err := s.CreateToken(ctx, SocketTenant); err == nil {
		t.Error("CreateToken made a token for the socket's tenant")
	}
	if _, err := s.CreateE2BToken(ctx, SocketTenant); err == nil {
		t.Error("CreateE2BToken made a token for the socket's tenant")
	}
	const old = "hutch_" + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	db := rawDB(t, path)
	if _, err := db.Exec("INSERT INTO tokens (hash, tenant, created_ns) VALUES (?, ?, 0)", TokenHash(old), SocketTenant); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TenantForToken(ctx, old); !errors.Is(err, ErrNotFound) {
		t.Errorf("a stored token of the socket's tenant authenticated: %v", err)
	}
}

func TestCheckTenant(t *testing.T) {
	for name, ok := range map[string]bool{
		"alice": true, "team-a.prod_2": true, "A": true, strings.Repeat("x", 64): true,
		"": false, "-a": false, ".a": false, "a b": false, "a/b": false, "ä": false, strings.Repeat("x", 65): false,
		SocketTenant: false,
	} {
		if err := CheckTenant(name); (err == nil) != ok {
			t.Errorf("CheckTenant(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}
