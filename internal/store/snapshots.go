package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Snapshot is the record of a snapshot of a sandbox's root layer: the
// layers (in the daemon's snapshot layer store) that stack over its base
// to make the source's root as it was.
type Snapshot struct {
	// ID names the snapshot ("snap-…"), uniquely across tenants.
	ID string
	// Tenant owns it.
	Tenant string
	// Source is the sandbox it was taken of.
	Source string
	// Root is the source's policy root (its base): "" for the host's,
	// else the image reference it named.
	Root string
	// Image is the digest of the base image; "" for the host's root.
	Image string
	// Layers are the digests of its layers, bottom first: those of the
	// snapshot the source started from, if any, then the source's own.
	Layers []string
	// Size is the bytes of its layers' files.
	Size int64
	// Created is when it was taken.
	Created time.Time
	// Deleted marks a snapshot its tenant deleted: it is no longer listed
	// or used for new sandboxes, and goes once no sandbox stacks it.
	Deleted bool
	// Name, when set, is the tenant's name for it, unique among the
	// tenant's snapshots not deleted (E2B's snapshot names, which its
	// creates take as a template).
	Name string
	// Tier is the isolation tier its source ran in.
	Tier string
	// Memory, when not 0, is the bytes of what was saved with its layers
	// of its source's kernel, processes and memory (gVisor's checkpoint,
	// in the daemon's snapshot store under the snapshot's ID): sandboxes
	// of that tier start from there, their processes going on.
	Memory int64
}

const snapshotColumns = `id, tenant, source, root, image, layers, size, created_ns, deleted, name, tier, memory`

// scanSnapshot reads a row of snapshotColumns.
func scanSnapshot(row scanner) (Snapshot, error) {
	var (
		sn      Snapshot
		layers  string
		created int64
	)
	if err := row.Scan(&sn.ID, &sn.Tenant, &sn.Source, &sn.Root, &sn.Image, &layers, &sn.Size, &created, &sn.Deleted, &sn.Name, &sn.Tier, &sn.Memory); err != nil {
		return Snapshot{}, err
	}
	if err := json.Unmarshal([]byte(layers), &sn.Layers); err != nil {
		return Snapshot{}, fmt.Errorf("layers: %w", err)
	}
	sn.Created = fromNanos(created)
	return sn, nil
}

// InsertSnapshot records a new snapshot. It returns an error wrapping
// ErrConflict if one with sn.ID exists, or a live one of the tenant's with
// sn.Name.
func (s *Store) InsertSnapshot(ctx context.Context, sn Snapshot) error {
	if sn.ID == "" || sn.Tenant == "" || sn.Size < 0 || sn.Memory < 0 || len(sn.Layers) == 0 {
		return fmt.Errorf("store: insert snapshot %q: incomplete record", sn.ID)
	}
	created, err := toNanos(sn.Created)
	if err != nil {
		return fmt.Errorf("store: insert snapshot %q: %w", sn.ID, err)
	}
	layers, _ := json.Marshal(sn.Layers)
	if sn.Tier == "" {
		sn.Tier = NamespaceTier
	}
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO snapshots (`+snapshotColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			sn.ID, sn.Tenant, sn.Source, sn.Root, sn.Image, string(layers), sn.Size, created, sn.Deleted, sn.Name, sn.Tier, sn.Memory)
		if isConstraint(err) {
			return ErrConflict
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("store: insert snapshot %q: %w", sn.ID, err)
	}
	return nil
}

// GetSnapshot returns snapshot id of tenant ("" matches any tenant), not
// deleted, also by its name (Snapshot.Name) when tenant is given; an
// error wrapping ErrNotFound if there is none.
func (s *Store) GetSnapshot(ctx context.Context, tenant, id string) (Snapshot, error) {
	sn, err := scanSnapshot(s.r.QueryRowContext(ctx, `SELECT `+snapshotColumns+` FROM snapshots
	WHERE (id = ? OR (? <> '' AND tenant = ? AND name = ?)) AND (? = '' OR tenant = ?) AND deleted = 0
	ORDER BY id = ? DESC LIMIT 1`, id, tenant, tenant, id, tenant, tenant, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Snapshot{}, fmt.Errorf("store: snapshot %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("store: snapshot %q: %w", id, describe(err))
	}
	return sn, nil
}

// ListSnapshots returns tenant's snapshots ("" for every tenant's), oldest
// first; deleted ones only with deleted.
func (s *Store) ListSnapshots(ctx context.Context, tenant string, deleted bool) ([]Snapshot, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+snapshotColumns+` FROM snapshots
	WHERE (? = '' OR tenant = ?) AND (? OR deleted = 0) ORDER BY created_ns, id`, tenant, tenant, deleted)
	if err != nil {
		return nil, fmt.Errorf("store: list snapshots: %w", describe(err))
	}
	defer rows.Close()
	var out []Snapshot
	for rows.Next() {
		sn, err := scanSnapshot(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list snapshots: %w", err)
		}
		out = append(out, sn)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list snapshots: %w", describe(err))
	}
	return out, nil
}

// MarkSnapshotDeleted marks tenant's snapshot id deleted ("" tenant:
// any's); an error wrapping ErrNotFound if there is no such snapshot not
// deleted yet.
func (s *Store) MarkSnapshotDeleted(ctx context.Context, tenant, id string) error {
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE snapshots SET deleted = 1
	WHERE id = ? AND (? = '' OR tenant = ?) AND deleted = 0`, id, tenant, tenant)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: delete snapshot %q: %w", id, err)
	}
	return nil
}

// RemoveSnapshot removes the record of snapshot id.
func (s *Store) RemoveSnapshot(ctx context.Context, id string) error {
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM snapshots WHERE id = ?`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: remove snapshot %q: %w", id, err)
	}
	return nil
}
