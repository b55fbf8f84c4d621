package client

import (
	"context"
	"net/http"
)

// TokenOptions describes an API token to make.
type TokenOptions struct {
	// Tenant is the tenant the token acts as: 1-64 letters, digits, '.',
	// '_' or '-', beginning with a letter or digit.
	Tenant string
	// E2B makes the token shaped as an E2B API key (e2b_ and 40 hex
	// digits), for E2B's SDKs; it works for hutch's API too.
	E2B bool
}

// CreateToken makes an API token for a tenant and returns it; the daemon
// keeps only its hash. Only the daemon's operator may: a Client on the
// daemon's unix socket without a token. Anyone else gets an *Error that
// matches ErrPermission (or ErrUnauthorized over TCP without a token).
func (c *Client) CreateToken(ctx context.Context, o TokenOptions) (string, error) {
	in := struct {
		Tenant string `json:"tenant"`
		E2B    bool   `json:"e2b,omitempty"`
	}{o.Tenant, o.E2B}
	var out struct {
		Token string `json:"token"`
	}
	if err := c.call(ctx, http.MethodPost, "/v1/tokens", nil, in, &out); err != nil {
		return "", err
	}
	return out.Token, nil
}
