package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

const (
	// tokenPrefix starts every token, so that a token is recognizable
	// (by a person, or a scanner for leaked secrets).
	tokenPrefix = "hutch_"
	// tokenBytes is a token's number of random bytes.
	tokenBytes = 32

	// e2bTokenPrefix starts every token made by CreateE2BToken, the shape
	// of an E2B API key, which E2B's SDKs expect.
	e2bTokenPrefix = "e2b_"
	// e2bTokenBytes is the number of random bytes of such a token.
	e2bTokenBytes = 20
)

// e2bTokenLen is the length of a token made by CreateE2BToken: the prefix and
// 40 lowercase hex digits.
var e2bTokenLen = len(e2bTokenPrefix) + hex.EncodedLen(e2bTokenBytes)

// tokenLen is a token's length: the prefix and the unpadded base64url of its
// random bytes (43 characters).
var tokenLen = len(tokenPrefix) + base64.RawURLEncoding.EncodedLen(tokenBytes)

// TokenHash is what a Backend keeps of a token: its SHA-256.
func TokenHash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// MakeToken makes a new API token: "hutch_" followed by the base64url
// (unpadded) of 32 random bytes.
func MakeToken() (string, error) {
	var b [tokenBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// MakeE2BToken makes a new API token shaped as an E2B API key, "e2b_"
// followed by 40 lowercase hex digits (20 random bytes); E2B's SDKs check
// the shape of their key.
func MakeE2BToken() (string, error) {
	var b [e2bTokenBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return e2bTokenPrefix + hex.EncodeToString(b[:]), nil
}

// CreateToken makes a new API token for tenant (MakeToken) and returns it;
// the store keeps only its SHA-256, so the token cannot be read back.
func (s *Store) CreateToken(ctx context.Context, tenant string) (string, error) {
	return s.insertToken(ctx, tenant, MakeToken)
}

// CreateE2BToken makes a new API token for tenant shaped as an E2B API key
// (MakeE2BToken) and returns it. It acts as any other token of tenant.
func (s *Store) CreateE2BToken(ctx context.Context, tenant string) (string, error) {
	return s.insertToken(ctx, tenant, MakeE2BToken)
}

// CheckTenant checks the syntax of a tenant's name for a new token: 1 to 64
// letters, digits, '.', '_' or '-', beginning with a letter or digit; and
// not SocketTenant, which needs no token.
func CheckTenant(name string) error {
	ok := name != "" && len(name) <= 64
	for i, c := range name {
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || !strings.ContainsRune("._-", c)) {
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("tenant %q: want 1-64 letters, digits, '.', '_' or '-', beginning with a letter or digit", name)
	}
	if name == SocketTenant {
		return fmt.Errorf("tenant %q is the unix socket's operator, who needs no token; name the tenant otherwise", name)
	}
	return nil
}

// SocketTenant is the tenant of requests on the daemon's unix socket that
// carry no token: its operator. No token is ever made for it, so that no
// token over TCP acts on the operator's sandboxes.
const SocketTenant = "admin"

// CheckTokenOwner checks tenant as the owner of a new token: not empty,
// and not SocketTenant.
func CheckTokenOwner(tenant string) error {
	if tenant == "" {
		return errors.New("empty tenant")
	}
	if tenant == SocketTenant {
		return fmt.Errorf("the tenant %q is the unix socket's operator, who needs no token; name the tenant otherwise", tenant)
	}
	return nil
}

// insertToken records a token newToken makes (by its hash) as tenant's.
func (s *Store) insertToken(ctx context.Context, tenant string, newToken func() (string, error)) (string, error) {
	if err := CheckTokenOwner(tenant); err != nil {
		return "", fmt.Errorf("store: create token: %w", err)
	}
	token, err := newToken()
	if err != nil {
		return "", fmt.Errorf("store: create token for %q: %w", tenant, err)
	}
	_, err = s.w.ExecContext(ctx,
		"INSERT INTO tokens (hash, tenant, created_ns) VALUES (?, ?, ?)",
		TokenHash(token), tenant, time.Now().UnixNano())
	if err != nil {
		return "", fmt.Errorf("store: create token for %q: %w", tenant, err)
	}
	return token, nil
}

// WellFormedToken reports whether token has the shape of a token
// MakeToken or MakeE2BToken makes.
func WellFormedToken(token string) bool {
	switch {
	case strings.HasPrefix(token, tokenPrefix):
		return len(token) == tokenLen
	case strings.HasPrefix(token, e2bTokenPrefix):
		return len(token) == e2bTokenLen
	}
	return false
}

// TenantForToken returns the tenant that token (of either shape) belongs
// to, or an error wrapping ErrNotFound if it is not a live token. The token is looked up by
// its SHA-256: the comparisons made on the way depend on the hash, not on
// the token, so their timing tells nothing useful about valid tokens.
func (s *Store) TenantForToken(ctx context.Context, token string) (string, error) {
	if !WellFormedToken(token) {
		return "", fmt.Errorf("store: token: %w", ErrNotFound)
	}
	var tenant string
	err := s.r.QueryRowContext(ctx, "SELECT tenant FROM tokens WHERE hash = ?", TokenHash(token)).Scan(&tenant)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("store: token: %w", ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("store: token: %w", err)
	}
	if tenant == SocketTenant {
		// Made by an older hutch: it would act as the socket's operator.
		return "", fmt.Errorf("store: token of the reserved tenant %q: %w", tenant, ErrNotFound)
	}
	return tenant, nil
}

// RevokeTokens deletes every token of tenant and returns how many there
// were.
func (s *Store) RevokeTokens(ctx context.Context, tenant string) (int, error) {
	res, err := s.w.ExecContext(ctx, "DELETE FROM tokens WHERE tenant = ?", tenant)
	if err != nil {
		return 0, fmt.Errorf("store: revoke tokens of %q: %w", tenant, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("store: revoke tokens of %q: %w", tenant, err)
	}
	return int(n), nil
}
