package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// The states of a sandbox.
const (
	StateStarting = "starting" // being set up
	StateRunning  = "running"  // its processes run
	StatePaused   = "paused"   // its processes are frozen, or saved to disk (Checkpoint)
	StateStopping = "stopping" // being torn down
	StateStopped  = "stopped"  // gone; the record remains
)

// ValidState reports whether state is one of the states of a sandbox.
func ValidState(state string) bool {
	switch state {
	case StateStarting, StateRunning, StatePaused, StateStopping, StateStopped:
		return true
	}
	return false
}

// Sandbox is the record of one sandbox.
type Sandbox struct {
	// ID names the sandbox, uniquely across tenants.
	ID string
	// Tenant owns the sandbox.
	Tenant string
	// State is one of StateStarting, StateRunning, StatePaused,
	// StateStopping and StateStopped.
	State string
	// Labels are the tenant's key-value pairs, to find sandboxes by
	// (ListSandboxes). Keys are not empty. A sandbox without labels is
	// read back with a nil map.
	Labels map[string]string
	// Spec is the sandbox's policy, as JSON. It is empty or valid JSON;
	// empty is read back as nil.
	Spec []byte
	// Created is when the sandbox was created.
	Created time.Time
	// Expires is when the sandbox is to be stopped; zero for never.
	Expires time.Time
	// LastActive is when the sandbox was last used.
	LastActive time.Time
	// IdleTimeout is how long the sandbox may stay unused; zero for no
	// limit.
	IdleTimeout time.Duration
	// PID is the host pid of the sandbox's PID 1; zero for none.
	PID int
	// PIDStart is the start time of PID (field 22 of /proc/PID/stat), to
	// tell PID from a process that reused the number after a restart of
	// the daemon.
	PIDStart uint64
	// Dir is the sandbox's directory under the daemon's state directory.
	Dir string
	// Image is the digest of the image the sandbox started from ("" for
	// the host's root).
	Image string
	// Tier is the isolation tier the sandbox runs in (policy.Tiers); it
	// does not change in the sandbox's life. Empty is recorded as
	// NamespaceTier, which the sandboxes recorded before tiers (schema
	// version 2 and earlier) read as.
	Tier string
	// Checkpoint is the directory a sandbox paused to disk is saved in
	// (StatePaused, no process left); empty for every other sandbox.
	Checkpoint string
	// Volumes are the host directories shown in the sandbox, as the
	// daemon encodes them (JSON), kept for its life as Spec is; empty
	// (read back as nil) for none. They do not change in its life.
	Volumes []byte
	// Owner is the replica of hutch serve that serves the sandbox (its
	// agent's connection, its timers), where several share one store (a
	// cluster's); empty on one machine.
	Owner string
	// Notes are what front ends keep with the record, by front end (E2B's
	// template, network and lifecycle of the sandbox), so that any daemon
	// sharing the store answers for it; read back as nil when empty.
	Notes map[string]string
}

// NamespaceTier is the namespace tier's name (policy.TierNamespace; the
// store imports nothing of hutch's): the tier of a record that names
// none.
const NamespaceTier = "namespace"

// Filter selects sandboxes in ListSandboxes. Its zero value selects all.
type Filter struct {
	// Tenant, if not empty, selects the sandboxes of that tenant.
	Tenant string
	// State, if not empty, selects the sandboxes in that state.
	State string
	// Labels selects the sandboxes that have all of these labels, with
	// these values.
	Labels map[string]string
}

// sandboxColumns are the columns scanSandbox reads, in its order; s is the
// sandboxes table.
const sandboxColumns = `s.id, s.tenant, s.state, s.spec, s.created_ns, s.expires_ns,
	s.last_active_ns, s.idle_timeout_ns, s.pid, s.pid_start, s.dir, s.image, s.tier, s.checkpoint, s.volumes, s.owner, s.notes,
	(SELECT json_group_object(l.key, l.value) FROM sandbox_labels l WHERE l.sandbox_id = s.id)`

// scanner is a *sql.Row or a *sql.Rows.
type scanner interface {
	Scan(dest ...any) error
}

// scanSandbox reads a row of sandboxColumns.
func scanSandbox(row scanner) (Sandbox, error) {
	var (
		sb                                   Sandbox
		created, expires, lastActive, idleNS int64
		pidStart                             int64
		labels, notes                        []byte
	)
	err := row.Scan(&sb.ID, &sb.Tenant, &sb.State, &sb.Spec, &created, &expires,
		&lastActive, &idleNS, &sb.PID, &pidStart, &sb.Dir, &sb.Image, &sb.Tier, &sb.Checkpoint, &sb.Volumes, &sb.Owner, &notes, &labels)
	if err != nil {
		return Sandbox{}, err
	}
	if len(sb.Spec) == 0 {
		sb.Spec = nil
	}
	if len(sb.Volumes) == 0 {
		sb.Volumes = nil
	}
	sb.Created = fromNanos(created)
	sb.Expires = fromNanos(expires)
	sb.LastActive = fromNanos(lastActive)
	sb.IdleTimeout = time.Duration(idleNS)
	sb.PIDStart = uint64(pidStart)
	if len(notes) > 0 {
		if err := json.Unmarshal(notes, &sb.Notes); err != nil {
			return Sandbox{}, fmt.Errorf("notes: %w", err)
		}
		if len(sb.Notes) == 0 {
			sb.Notes = nil
		}
	}
	if len(labels) > 0 {
		if err := json.Unmarshal(labels, &sb.Labels); err != nil {
			return Sandbox{}, fmt.Errorf("labels: %w", err)
		}
		if len(sb.Labels) == 0 {
			sb.Labels = nil
		}
	}
	return sb, nil
}

// minNanos and maxNanos bound the times that Unix nanoseconds in an int64
// can represent (years 1678 to 2262).
var (
	minNanos = time.Unix(0, math.MinInt64)
	maxNanos = time.Unix(0, math.MaxInt64)
)

// toNanos is t as UTC Unix nanoseconds, 0 for the zero time.
func toNanos(t time.Time) (int64, error) {
	if t.IsZero() {
		return 0, nil
	}
	if t.Before(minNanos) || t.After(maxNanos) {
		return 0, fmt.Errorf("time %v out of range", t)
	}
	return t.UnixNano(), nil
}

// fromNanos is the inverse of toNanos.
func fromNanos(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// row is a sandbox in the form of the sandboxes table.
type row struct {
	spec, notes                          []byte
	created, expires, lastActive, idleNS int64
	pidStart                             int64
}

// check validates sb and converts it to the table's form.
func check(sb *Sandbox) (row, error) {
	var r row
	switch {
	case sb.ID == "":
		return r, errors.New("empty id")
	case sb.Tenant == "":
		return r, errors.New("empty tenant")
	case !ValidState(sb.State):
		return r, fmt.Errorf("invalid state %q", sb.State)
	case sb.IdleTimeout < 0:
		return r, fmt.Errorf("negative idle timeout %v", sb.IdleTimeout)
	case sb.PID < 0:
		return r, fmt.Errorf("negative pid %d", sb.PID)
	case len(sb.Spec) > 0 && !json.Valid(sb.Spec):
		return r, errors.New("spec is not valid JSON")
	case sb.Checkpoint != "" && sb.State != StatePaused:
		return r, fmt.Errorf("a checkpoint for a sandbox that is %s, not paused", sb.State)
	}
	if _, ok := sb.Labels[""]; ok {
		return r, errors.New("empty label key")
	}
	var err error
	if r.created, err = toNanos(sb.Created); err != nil {
		return r, fmt.Errorf("created: %w", err)
	}
	if r.expires, err = toNanos(sb.Expires); err != nil {
		return r, fmt.Errorf("expires: %w", err)
	}
	if r.lastActive, err = toNanos(sb.LastActive); err != nil {
		return r, fmt.Errorf("last active: %w", err)
	}
	r.idleNS = int64(sb.IdleTimeout)
	r.pidStart = int64(sb.PIDStart)
	r.spec = sb.Spec
	if r.spec == nil {
		r.spec = []byte{} // the column is NOT NULL
	}
	r.notes = []byte{}
	if len(sb.Notes) > 0 {
		if r.notes, err = json.Marshal(sb.Notes); err != nil {
			return r, fmt.Errorf("notes: %w", err)
		}
	}
	if sb.Tier == "" {
		sb.Tier = NamespaceTier
	}
	return r, nil
}

// insertLabels adds labels to sandbox id.
func insertLabels(ctx context.Context, tx *sql.Tx, id string, labels map[string]string) error {
	if len(labels) == 0 {
		return nil
	}
	stmt, err := tx.PrepareContext(ctx, "INSERT INTO sandbox_labels (sandbox_id, key, value) VALUES (?, ?, ?)")
	if err != nil {
		return err
	}
	defer stmt.Close()
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if _, err := stmt.ExecContext(ctx, id, k, labels[k]); err != nil {
			return err
		}
	}
	return nil
}

// InsertSandbox records a new sandbox. It returns an error wrapping
// ErrConflict if a sandbox with sb.ID exists (of any tenant).
func (s *Store) InsertSandbox(ctx context.Context, sb Sandbox) error {
	r, err := check(&sb)
	if err != nil {
		return fmt.Errorf("store: insert sandbox %q: %w", sb.ID, err)
	}
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO sandboxes
	(id, tenant, state, spec, created_ns, expires_ns, last_active_ns, idle_timeout_ns, pid, pid_start, dir, image, tier, checkpoint, volumes, owner, notes)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			sb.ID, sb.Tenant, sb.State, r.spec, r.created, r.expires, r.lastActive, r.idleNS, sb.PID, r.pidStart, sb.Dir, sb.Image, sb.Tier, sb.Checkpoint, nonNil(sb.Volumes), sb.Owner, r.notes)
		if isConstraint(err) {
			return ErrConflict
		}
		if err != nil {
			return err
		}
		return insertLabels(ctx, tx, sb.ID, sb.Labels)
	})
	if err != nil {
		return fmt.Errorf("store: insert sandbox %q: %w", sb.ID, err)
	}
	return nil
}

// GetSandbox returns the sandbox id of tenant; tenant "" matches any
// tenant. A sandbox of another tenant is not found: the error wraps
// ErrNotFound, as for a sandbox that does not exist.
func (s *Store) GetSandbox(ctx context.Context, tenant, id string) (Sandbox, error) {
	sb, err := scanSandbox(s.r.QueryRowContext(ctx,
		"SELECT "+sandboxColumns+" FROM sandboxes s WHERE s.id = ?1 AND (?2 = '' OR s.tenant = ?2)",
		id, tenant))
	if errors.Is(err, sql.ErrNoRows) {
		return Sandbox{}, fmt.Errorf("store: get sandbox %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Sandbox{}, fmt.Errorf("store: get sandbox %q: %w", id, err)
	}
	return sb, nil
}

// listQuery returns the query of ListSandboxes for f and its arguments. The
// query is made of constant text: f's values are all parameters. Each label
// is a condition "id IN (SELECT sandbox_id FROM sandbox_labels WHERE key = ?
// AND value = ?)", which SQLite answers from the index on (key, value,
// sandbox_id).
func listQuery(f Filter) (string, []any) {
	var (
		q    strings.Builder
		args []any
	)
	q.WriteString("SELECT " + sandboxColumns + " FROM sandboxes s WHERE 1")
	if f.Tenant != "" {
		q.WriteString(" AND s.tenant = ?")
		args = append(args, f.Tenant)
	}
	if f.State != "" {
		q.WriteString(" AND s.state = ?")
		args = append(args, f.State)
	}
	for _, k := range slices.Sorted(maps.Keys(f.Labels)) {
		q.WriteString(" AND s.id IN (SELECT sandbox_id FROM sandbox_labels WHERE key = ? AND value = ?)")
		args = append(args, k, f.Labels[k])
	}
	q.WriteString(" ORDER BY s.created_ns, s.id")
	return q.String(), args
}

// ListSandboxes returns the sandboxes that f selects, ordered by Created
// (then by ID).
func (s *Store) ListSandboxes(ctx context.Context, f Filter) ([]Sandbox, error) {
	if f.State != "" && !ValidState(f.State) {
		return nil, fmt.Errorf("store: list sandboxes: invalid state %q", f.State)
	}
	q, args := listQuery(f)
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list sandboxes: %w", err)
	}
	defer rows.Close()
	var list []Sandbox
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list sandboxes: %w", err)
		}
		list = append(list, sb)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list sandboxes: %w", err)
	}
	return list, nil
}

// UpdateSandbox reads the sandbox id, passes it to fn to change, and writes
// it back, all in one transaction that holds the database's write lock, so
// that concurrent updates are applied one after the other. If fn returns an
// error, nothing is written and UpdateSandbox returns that error, wrapped.
// fn is given a copy whose Labels map is never nil; it may not change ID or
// Tenant. fn runs while the store's writing connection is held, so it must
// not write through the Store (it would wait forever); reading is fine. It returns the sandbox as written, or an
// error wrapping ErrNotFound.
func (s *Store) UpdateSandbox(ctx context.Context, id string, fn func(*Sandbox) error) (Sandbox, error) {
	var updated Sandbox
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		old, err := scanSandbox(tx.QueryRowContext(ctx,
			"SELECT "+sandboxColumns+" FROM sandboxes s WHERE s.id = ?", id))
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		sb, err := Modify(old, fn)
		if err != nil {
			return err
		}
		r, err := check(&sb)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE sandboxes SET
	state = ?, spec = ?, created_ns = ?, expires_ns = ?, last_active_ns = ?,
	idle_timeout_ns = ?, pid = ?, pid_start = ?, dir = ?, image = ?, checkpoint = ?, owner = ?, notes = ?
	WHERE id = ?`,
			sb.State, r.spec, r.created, r.expires, r.lastActive, r.idleNS, sb.PID, r.pidStart, sb.Dir, sb.Image, sb.Checkpoint, sb.Owner, r.notes, id)
		if err != nil {
			return err
		}
		if !maps.Equal(sb.Labels, old.Labels) {
			if _, err := tx.ExecContext(ctx, "DELETE FROM sandbox_labels WHERE sandbox_id = ?", id); err != nil {
				return err
			}
			if err := insertLabels(ctx, tx, id, sb.Labels); err != nil {
				return err
			}
		}
		updated = sb
		return nil
	})
	if err != nil {
		return Sandbox{}, fmt.Errorf("store: update sandbox %q: %w", id, err)
	}
	return updated, nil
}

// DeleteSandbox deletes the record of sandbox id and its labels. It returns
// an error wrapping ErrNotFound if there is none.
func (s *Store) DeleteSandbox(ctx context.Context, id string) error {
	res, err := s.w.ExecContext(ctx, "DELETE FROM sandboxes WHERE id = ?", id)
	if err != nil {
		return fmt.Errorf("store: delete sandbox %q: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("store: delete sandbox %q: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("store: delete sandbox %q: %w", id, ErrNotFound)
	}
	return nil
}

// CountSandboxes returns the number of sandboxes of tenant that are not
// stopped; tenant "" counts those of all tenants.
func (s *Store) CountSandboxes(ctx context.Context, tenant string) (int, error) {
	var (
		n   int
		err error
	)
	if tenant == "" {
		err = s.r.QueryRowContext(ctx, "SELECT count(*) FROM sandboxes WHERE state <> 'stopped'").Scan(&n)
	} else {
		err = s.r.QueryRowContext(ctx, "SELECT count(*) FROM sandboxes WHERE state <> 'stopped' AND tenant = ?", tenant).Scan(&n)
	}
	if err != nil {
		return 0, fmt.Errorf("store: count sandboxes of %q: %w", tenant, err)
	}
	return n, nil
}

// StateTier is a state and a tier, what CountStates counts sandboxes by.
type StateTier struct{ State, Tier string }

// CountStates returns the number of sandboxes in each state but stopped,
// by tier (the pairs without any are left out), leaving out the
// sandboxes of tenant except.
func (s *Store) CountStates(ctx context.Context, except string) (map[StateTier]int, error) {
	rows, err := s.r.QueryContext(ctx,
		"SELECT state, tier, count(*) FROM sandboxes WHERE state <> 'stopped' AND tenant <> ? GROUP BY state, tier", except)
	if err != nil {
		return nil, fmt.Errorf("store: count sandboxes by state: %w", err)
	}
	defer rows.Close()
	out := make(map[StateTier]int)
	for rows.Next() {
		var (
			k StateTier
			n int
		)
		if err := rows.Scan(&k.State, &k.Tier, &n); err != nil {
			return nil, fmt.Errorf("store: count sandboxes by state: %w", err)
		}
		out[k] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: count sandboxes by state: %w", err)
	}
	return out, nil
}

// MemoryOf returns the sum of the memory limits (resources.memory of their
// policies, in bytes) of tenant's sandboxes that are not stopped; an empty
// policy has none.
func (s *Store) MemoryOf(ctx context.Context, tenant string) (int64, error) {
	var n int64
	err := s.r.QueryRowContext(ctx, `SELECT coalesce(sum(json_extract(NULLIF(CAST(spec AS TEXT), ''), '$.resources.memory')), 0)
		FROM sandboxes WHERE state <> 'stopped' AND tenant = ?`, tenant).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("store: memory of %q: %w", tenant, err)
	}
	return n, nil
}

// nonNil is b, or an empty slice for nil: the volumes column is NOT NULL.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
