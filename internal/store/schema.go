package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// migrations are the schema's versions: migrations[i] turns version i into
// version i+1. A migration, once released, is never edited; a change of the
// schema is a new migration appended here.
var migrations = []string{
	// Version 1.
	`
CREATE TABLE tokens (
	hash       BLOB PRIMARY KEY CHECK (length(hash) = 32), -- SHA-256 of the token
	tenant     TEXT NOT NULL CHECK (tenant <> ''),
	created_ns INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

CREATE INDEX tokens_tenant ON tokens (tenant);

CREATE TABLE sandboxes (
	id              TEXT PRIMARY KEY CHECK (id <> ''),
	tenant          TEXT NOT NULL CHECK (tenant <> ''),
	state           TEXT NOT NULL CHECK (state IN ('starting', 'running', 'paused', 'stopping', 'stopped')),
	spec            BLOB NOT NULL,
	created_ns      INTEGER NOT NULL,
	expires_ns      INTEGER NOT NULL,
	last_active_ns  INTEGER NOT NULL,
	idle_timeout_ns INTEGER NOT NULL CHECK (idle_timeout_ns >= 0),
	pid             INTEGER NOT NULL CHECK (pid >= 0),
	pid_start       INTEGER NOT NULL, -- a uint64 stored in its int64 bits
	dir             TEXT NOT NULL
) STRICT;

CREATE INDEX sandboxes_created ON sandboxes (created_ns, id);
CREATE INDEX sandboxes_tenant_created ON sandboxes (tenant, created_ns, id);

CREATE TABLE sandbox_labels (
	sandbox_id TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
	key        TEXT NOT NULL CHECK (key <> ''),
	value      TEXT NOT NULL,
	PRIMARY KEY (sandbox_id, key)
) STRICT, WITHOUT ROWID;

-- Filtering by label looks candidates up here.
CREATE INDEX sandbox_labels_key_value ON sandbox_labels (key, value, sandbox_id);
`,
	// Version 2: the digest of the image a sandbox started from.
	`
ALTER TABLE sandboxes ADD COLUMN image TEXT NOT NULL DEFAULT '';
`,
	// Version 3: the isolation tier a sandbox runs in; the sandboxes
	// recorded before ran in the namespace tier, the only one then.
	`
ALTER TABLE sandboxes ADD COLUMN tier TEXT NOT NULL DEFAULT 'namespace' CHECK (tier <> '');
`,
	// Version 4: where a sandbox paused to disk is saved; the sandboxes
	// recorded before were never saved.
	`
ALTER TABLE sandboxes ADD COLUMN checkpoint TEXT NOT NULL DEFAULT '';
`,
	// Version 5: snapshots of sandboxes' root layers.
	`
CREATE TABLE snapshots (
	id         TEXT PRIMARY KEY CHECK (id <> ''),
	tenant     TEXT NOT NULL CHECK (tenant <> ''),
	source     TEXT NOT NULL,
	root       TEXT NOT NULL,            -- the base: the source's policy root
	image      TEXT NOT NULL DEFAULT '', -- the base image's digest; '' for the host's root
	layers     TEXT NOT NULL,            -- JSON array of layer digests, bottom first
	size       INTEGER NOT NULL CHECK (size >= 0),
	created_ns INTEGER NOT NULL,
	deleted    INTEGER NOT NULL DEFAULT 0 CHECK (deleted IN (0, 1)),
	name       TEXT NOT NULL DEFAULT ''  -- the tenant's name for it (E2B's), unique among its live ones
) STRICT;

CREATE INDEX snapshots_tenant_created ON snapshots (tenant, created_ns, id);
CREATE UNIQUE INDEX snapshots_tenant_name ON snapshots (tenant, name) WHERE name <> '' AND deleted = 0;
`,
	// Version 6: the tier a snapshot's source ran in, and the bytes of the
	// kernel, processes and memory saved with it (gVisor's); the
	// snapshots recorded before were of the namespace tier's files only.
	`
ALTER TABLE snapshots ADD COLUMN tier TEXT NOT NULL DEFAULT 'namespace' CHECK (tier <> '');
ALTER TABLE snapshots ADD COLUMN memory INTEGER NOT NULL DEFAULT 0 CHECK (memory >= 0);
`,
	// Version 7: the host directories shown in a sandbox (its volumes),
	// as the daemon encodes them; the sandboxes recorded before had none.
	`
ALTER TABLE sandboxes ADD COLUMN volumes BLOB NOT NULL DEFAULT x'';
`,
	// Version 8: the replica of hutch serve that serves a sandbox (the
	// sandboxes recorded before were one daemon's), and the front ends'
	// notes of a sandbox (JSON object; none before).
	`
ALTER TABLE sandboxes ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN notes BLOB NOT NULL DEFAULT x'';
`,
}

// migrate creates the table schema_migrations if it is missing and applies
// the migrations the file lacks, all in one IMMEDIATE transaction, so that
// two processes opening a new file at once do not both migrate it.
func (s *Store) migrate(ctx context.Context) error {
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER PRIMARY KEY,
	applied_ns INTEGER NOT NULL
) STRICT`); err != nil {
			return fmt.Errorf("migrate: %w", describe(err))
		}
		var current int
		if err := tx.QueryRowContext(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&current); err != nil {
			return fmt.Errorf("migrate: %w", describe(err))
		}
		if current > len(migrations) {
			return fmt.Errorf("schema version %d is newer than this hutch knows (%d): the file was written by a later hutch", current, len(migrations))
		}
		for v := current + 1; v <= len(migrations); v++ {
			if _, err := tx.ExecContext(ctx, migrations[v-1]); err != nil {
				return fmt.Errorf("migrate to version %d: %w", v, err)
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations (version, applied_ns) VALUES (?, ?)", v, time.Now().UnixNano()); err != nil {
				return fmt.Errorf("migrate to version %d: %w", v, err)
			}
		}
		if current == 0 {
			if _, err := tx.ExecContext(ctx, setApplicationID); err != nil {
				return fmt.Errorf("migrate: set application id: %w", err)
			}
		}
		return nil
	})
}

// schemaVersion returns the file's schema version.
func (s *Store) schemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.r.QueryRowContext(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&v)
	return v, err
}
