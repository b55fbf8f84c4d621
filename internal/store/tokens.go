package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
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
)

// tokenLen is a token's length: the prefix and the unpadded base64url of its
// random bytes (43 characters).
var tokenLen = len(tokenPrefix) + base64.RawURLEncoding.EncodedLen(tokenBytes)

// tokenHash is what the store keeps of a token.
func tokenHash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// CreateToken makes a new API token for tenant and returns it. The token is
// "hutch_" followed by the base64url (unpadded) of 32 random bytes; the
// store keeps only its SHA-256, so the token cannot be read back.
func (s *Store) CreateToken(ctx context.Context, tenant string) (string, error) {
	if tenant == "" {
		return "", errors.New("store: create token: empty tenant")
	}
	var b [tokenBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("store: create token for %q: %w", tenant, err)
	}
	token := tokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	_, err := s.w.ExecContext(ctx,
		"INSERT INTO tokens (hash, tenant, created_ns) VALUES (?, ?, ?)",
		tokenHash(token), tenant, time.Now().UnixNano())
	if err != nil {
		return "", fmt.Errorf("store: create token for %q: %w", tenant, err)
	}
	return token, nil
}

// TenantForToken returns the tenant that token belongs to, or an error
// wrapping ErrNotFound if it is not a live token. The token is looked up by
// its SHA-256: the comparisons made on the way depend on the hash, not on
// the token, so their timing tells nothing useful about valid tokens.
func (s *Store) TenantForToken(ctx context.Context, token string) (string, error) {
	if len(token) != tokenLen || !strings.HasPrefix(token, tokenPrefix) {
		return "", fmt.Errorf("store: token: %w", ErrNotFound)
	}
	var tenant string
	err := s.r.QueryRowContext(ctx, "SELECT tenant FROM tokens WHERE hash = ?", tokenHash(token)).Scan(&tenant)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("store: token: %w", ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("store: token: %w", err)
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
