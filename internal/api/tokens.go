package api

import (
	"net/http"

	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// TokenBody is the body of POST /v1/tokens.
type TokenBody struct {
	// Tenant is the tenant the token acts as.
	Tenant string `json:"tenant"`
	// E2B makes the token shaped as an E2B API key (e2b_ and 40 hex
	// digits), for E2B's SDKs; it works for hutch's API too.
	E2B bool `json:"e2b,omitempty"`
}

// TokenResult is the answer of POST /v1/tokens: the token, which the
// daemon keeps only as a hash and never shows again.
type TokenResult struct {
	Tenant string `json:"tenant"`
	Token  string `json:"token"`
}

// createToken makes an API token for a tenant. Only the daemon's operator
// may: a request on the unix socket without a token. A tenant, with its
// own token on either listener, may not make tokens for itself or others.
func (h *handler) createToken(w http.ResponseWriter, r *http.Request) error {
	if err := operatorOnly(r, "tokens are made by hutch token create"); err != nil {
		return err
	}
	var b TokenBody
	if err := decodeBody(w, r, &b, false); err != nil {
		return err
	}
	if err := store.CheckTenant(b.Tenant); err != nil {
		return errorf(daemon.ErrInvalid, "%v", err)
	}
	auditEntry(r).Subject = b.Tenant
	create := h.m.Store().CreateToken
	if b.E2B {
		create = h.m.Store().CreateE2BToken
	}
	token, err := create(r.Context(), b.Tenant)
	if err != nil {
		return err
	}
	h.log.Info("token created", "for", b.Tenant, "e2b", b.E2B)
	writeJSON(w, http.StatusCreated, TokenResult{Tenant: b.Tenant, Token: token})
	return nil
}
