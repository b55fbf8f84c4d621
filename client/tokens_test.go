package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/client"
)

// TestCreateToken: the operator (the socket, no token) makes a token, which
// then works over TCP as its tenant; a tenant may not make tokens.
func TestCreateToken(t *testing.T) {
	ctx := context.Background()
	var admin client.Client // HUTCH_HOST is the test daemon's socket
	tok, err := admin.CreateToken(ctx, client.TokenOptions{Tenant: "sdk-tenant"})
	if err != nil || !strings.HasPrefix(tok, "hutch_") {
		t.Fatalf("CreateToken = %q, %v", tok, err)
	}
	e2b, err := admin.CreateToken(ctx, client.TokenOptions{Tenant: "sdk-tenant", E2B: true})
	if err != nil || !strings.HasPrefix(e2b, "e2b_") {
		t.Fatalf("CreateToken(E2B) = %q, %v", e2b, err)
	}
	remote, err := client.New(testTCP, tok)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Health(ctx); err != nil {
		t.Fatalf("the new token over TCP: %v", err)
	}
	if _, err := remote.CreateToken(ctx, client.TokenOptions{Tenant: "other"}); !errors.Is(err, client.ErrPermission) {
		t.Errorf("a tenant made a token: %v", err)
	}
	if _, err := admin.CreateToken(ctx, client.TokenOptions{Tenant: "no spaces"}); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("a bad tenant name: %v", err)
	}
}
