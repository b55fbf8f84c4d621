package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
)

// The tokens' shapes, their lookup and revocation are the suite's of
// every Backend (storetest, TestConformance).

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
