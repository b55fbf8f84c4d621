package store

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
)

// Backend is where hutch serve keeps its state: the methods of the store
// the daemon and its front ends use. *Store, one SQLite file, is the
// backend of one hutch serve; package kube's keeps the state in a
// Kubernetes cluster, shared by the replicas of hutch serve behind one
// Service.
//
// Every Backend reads a sandbox back in the form Normalize gives it, and
// reports a missing record, a duplicate ID and an unknown token with the
// errors *Store does (ErrNotFound, ErrConflict); a Backend that does not
// keep snapshots says so with an error wrapping ErrUnsupported.
type Backend interface {
	// InsertSandbox records a new sandbox; an error wrapping ErrConflict
	// if one with its ID exists (of any tenant).
	InsertSandbox(ctx context.Context, sb Sandbox) error
	// GetSandbox returns sandbox id of tenant ("" for any tenant); an
	// error wrapping ErrNotFound if there is none.
	GetSandbox(ctx context.Context, tenant, id string) (Sandbox, error)
	// ListSandboxes returns the sandboxes f selects, ordered by Created,
	// then by ID.
	ListSandboxes(ctx context.Context, f Filter) ([]Sandbox, error)
	// UpdateSandbox reads sandbox id, has fn change it (Modify) and
	// writes it back, as one step against concurrent updates, and
	// returns it as written. fn may run more than once: when another
	// writer changed the record between the read and the write, it is
	// read again and fn runs on that; so fn must not act on anything but
	// the record it is given. fn's error aborts, nothing written.
	UpdateSandbox(ctx context.Context, id string, fn func(*Sandbox) error) (Sandbox, error)
	// DeleteSandbox deletes the record of sandbox id; an error wrapping
	// ErrNotFound if there is none.
	DeleteSandbox(ctx context.Context, id string) error
	// CountSandboxes counts tenant's sandboxes not stopped ("" for all
	// tenants').
	CountSandboxes(ctx context.Context, tenant string) (int, error)
	// CountStates counts the sandboxes not stopped by state and tier,
	// those of tenant except left out.
	CountStates(ctx context.Context, except string) (map[StateTier]int, error)
	// MemoryOf sums the memory limits of tenant's sandboxes not stopped.
	MemoryOf(ctx context.Context, tenant string) (int64, error)

	// The snapshots' records (see *Store's methods).
	InsertSnapshot(ctx context.Context, sn Snapshot) error
	GetSnapshot(ctx context.Context, tenant, id string) (Snapshot, error)
	ListSnapshots(ctx context.Context, tenant string, deleted bool) ([]Snapshot, error)
	MarkSnapshotDeleted(ctx context.Context, tenant, id string) error
	RemoveSnapshot(ctx context.Context, id string) error

	// CreateToken and CreateE2BToken make a new token of tenant
	// (MakeToken, MakeE2BToken) and keep only its hash.
	CreateToken(ctx context.Context, tenant string) (string, error)
	CreateE2BToken(ctx context.Context, tenant string) (string, error)
	// TenantForToken returns the tenant of token; an error wrapping
	// ErrNotFound if it is not a live token.
	TenantForToken(ctx context.Context, token string) (string, error)
	// RevokeTokens deletes every token of tenant and returns how many
	// there were.
	RevokeTokens(ctx context.Context, tenant string) (int, error)

	// Close releases the backend.
	Close() error
}

var _ Backend = (*Store)(nil)

// ErrUnsupported is returned, wrapped, by a Backend for what it does not
// keep (the snapshots of a cluster's state).
var ErrUnsupported = errors.New("not supported")

// Normalize checks sb as InsertSandbox does and puts it in the form every
// Backend reads a sandbox back in: Tier "" as NamespaceTier, empty Labels,
// Spec and Volumes as nil, times in UTC with no monotonic reading.
func Normalize(sb *Sandbox) error {
	r, err := check(sb)
	if err != nil {
		return err
	}
	if len(sb.Labels) == 0 {
		sb.Labels = nil
	}
	if len(sb.Spec) == 0 {
		sb.Spec = nil
	}
	if len(sb.Volumes) == 0 {
		sb.Volumes = nil
	}
	if len(sb.Notes) == 0 {
		sb.Notes = nil
	}
	sb.Created = fromNanos(r.created)
	sb.Expires = fromNanos(r.expires)
	sb.LastActive = fromNanos(r.lastActive)
	return nil
}

// Modify is UpdateSandbox's change of old, a record as read: fn is given
// a copy, whose Labels and Notes maps are never nil, and may not change its ID,
// Tenant, Tier or Volumes; the result is checked and normalized
// (Normalize). fn's error is returned as is.
func Modify(old Sandbox, fn func(*Sandbox) error) (Sandbox, error) {
	sb := old
	sb.Labels = maps.Clone(old.Labels)
	if sb.Labels == nil {
		sb.Labels = make(map[string]string)
	}
	sb.Spec = slices.Clone(old.Spec)
	sb.Volumes = slices.Clone(old.Volumes)
	sb.Notes = maps.Clone(old.Notes)
	if sb.Notes == nil {
		sb.Notes = make(map[string]string)
	}
	if err := fn(&sb); err != nil {
		return Sandbox{}, err
	}
	if sb.ID != old.ID || sb.Tenant != old.Tenant || sb.Tier != old.Tier || !bytes.Equal(sb.Volumes, old.Volumes) {
		return Sandbox{}, errors.New("the id, the tenant, the tier and the volumes of a sandbox cannot change")
	}
	if err := Normalize(&sb); err != nil {
		return Sandbox{}, err
	}
	return sb, nil
}
