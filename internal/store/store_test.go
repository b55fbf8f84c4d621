package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"modernc.org/sqlite"
)

// openTest opens a store in a new file under t.TempDir and closes it at the
// end of the test.
func openTest(t testing.TB) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s, path
}

// rawDB opens path with the driver alone, for tests that look at or damage
// a file behind the store's back.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	c, err := sqlite.NewConnector(path)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { db.Close() })
	return db
}

func TestOpenCreatesSchema(t *testing.T) {
	ctx := context.Background()
	s, path := openTest(t)

	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if mode := fi.Mode().Perm(); mode != 0o600 {
		t.Errorf("file mode %v, want 0600", mode)
	}

	v, err := s.schemaVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v != len(migrations) || v != 8 {
		t.Errorf("schema version %d, want 8", v)
	}

	var mode string
	if err := s.r.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" {
		t.Errorf("journal mode %q, want wal", mode)
	}
	for _, db := range []*sql.DB{s.r, s.w} {
		var fk, timeout int
		if err := db.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&timeout); err != nil {
			t.Fatal(err)
		}
		if fk != 1 || timeout != busyTimeoutMillis {
			t.Errorf("foreign_keys %d, busy_timeout %d; want 1, %d", fk, timeout, busyTimeoutMillis)
		}
	}
	var appID int64
	if err := s.r.QueryRowContext(ctx, "PRAGMA application_id").Scan(&appID); err != nil {
		t.Fatal(err)
	}
	if appID != applicationID {
		t.Errorf("application_id %#x, want %#x", appID, applicationID)
	}

	// The reading pool cannot write.
	if _, err := s.r.ExecContext(ctx, "DELETE FROM tokens"); err == nil {
		t.Error("a write through the reading pool succeeded")
	}

	// WAL and shared-memory files get the database file's mode.
	if _, err := s.CreateToken(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		fi, err := os.Stat(path + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if mode := fi.Mode().Perm(); mode != 0o600 {
			t.Errorf("%s mode %v, want 0600", suffix, mode)
		}
	}
}

func TestReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	token, err := s.CreateToken(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	sb := testSandbox("sb1", "acme")
	if err := s.InsertSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	for range 2 {
		s, err = Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if tenant, err := s.TenantForToken(ctx, token); err != nil || tenant != "acme" {
			t.Errorf("TenantForToken after reopen = %q, %v", tenant, err)
		}
		got, err := s.GetSandbox(ctx, "acme", "sb1")
		if err != nil {
			t.Fatal(err)
		}
		assertSandbox(t, got, sb)
		var applied int
		if err := s.r.QueryRowContext(ctx, "SELECT count(*) FROM schema_migrations").Scan(&applied); err != nil {
			t.Fatal(err)
		}
		if applied != len(migrations) {
			t.Errorf("%d migrations recorded, want %d", applied, len(migrations))
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOpenMissingDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "state.db")
	_, err := Open(path)
	if err == nil || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "store: open") {
		t.Fatalf("Open in a missing directory: %v", err)
	}
}

// openErr opens path, expects an error mentioning want and returns it.
func openErr(t *testing.T, path, want string) {
	t.Helper()
	s, err := Open(path)
	if err == nil {
		s.Close()
		t.Fatalf("Open(%s) succeeded", filepath.Base(path))
	}
	if !strings.HasPrefix(err.Error(), "store: open ") || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open(%s): %v\nwant an error containing %q", filepath.Base(path), err, want)
	}
	t.Logf("Open(%s): %v", filepath.Base(path), err)
}

func TestOpenNotSQLite(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string][]byte{
		"text":    []byte("this is not a database\n"),
		"garbage": []byte(strings.Repeat("\x8f\x01\xfe\x22", 4096)),
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			if err := os.WriteFile(path, content, 0o600); err != nil {
				t.Fatal(err)
			}
			openErr(t, path, "not a hutch state file: not an SQLite database")
			// The file was not changed.
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(content) {
				t.Error("Open changed the file")
			}
		})
	}
}

func TestOpenForeignDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other.db")
	db := rawDB(t, path)
	if _, err := db.Exec("CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	openErr(t, path, "not a hutch state file: an SQLite database of another application")

	// Another application's ID, even on an empty database.
	path = filepath.Join(t.TempDir(), "other-id.db")
	db = rawDB(t, path)
	if _, err := db.Exec("PRAGMA application_id = 1234"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	openErr(t, path, "application_id 0x4d2")
}

func TestOpenCorrupt(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		sb := testSandbox("sb"+strings.Repeat("x", i), "acme")
		if err := s.InsertSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Overwrite every page but the first (the header and the schema)
	// with a pattern.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pageSize := int(data[16])<<8 | int(data[17])
	if pageSize == 1 {
		pageSize = 65536
	}
	if len(data) < 3*pageSize {
		t.Fatalf("file of %d bytes: too small to damage", len(data))
	}
	for i := pageSize; i < len(data); i++ {
		data[i] = byte(i * 7)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	openErr(t, path, "corrupt")
}

func TestOpenNewerSchema(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, "INSERT INTO schema_migrations (version, applied_ns) VALUES (?, 0)", len(migrations)+1); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	openErr(t, path, fmt.Sprintf("schema version %d is newer than this hutch knows (%d)", len(migrations)+1, len(migrations)))
}

func TestPathWithURICharacters(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "a?b#c%20d")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "state.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateToken(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("files in the directory: %v, want only state.db", entries)
	}
}

// openOld opens a file of schema version (its migrations applied as a
// hutch of then did), with rows inserted before: Open migrates it.
func openOld(t *testing.T, version int, rows ...string) *Store {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	db := rawDB(t, path)
	stmts := []string{"CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_ns INTEGER NOT NULL) STRICT"}
	for v := 1; v <= version; v++ {
		stmts = append(stmts, migrations[v-1], fmt.Sprintf("INSERT INTO schema_migrations (version, applied_ns) VALUES (%d, 0)", v))
	}
	stmts = append(append(stmts, setApplicationID), rows...)
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestMigrateImage: a file of schema version 1 (before sandboxes recorded
// their image) is migrated on open; its sandboxes read back without one.
func TestMigrateImage(t *testing.T) {
	ctx := context.Background()
	s := openOld(t, 1, `INSERT INTO sandboxes (id, tenant, state, spec, created_ns, expires_ns, last_active_ns, idle_timeout_ns, pid, pid_start, dir)
			VALUES ('old', 'acme', 'stopped', x'', 1, 2, 3, 0, 0, 0, '/x')`)
	if v, err := s.schemaVersion(ctx); err != nil || v != len(migrations) {
		t.Errorf("schema version %d, %v; want %d", v, err, len(migrations))
	}
	sb, err := s.GetSandbox(ctx, "acme", "old")
	if err != nil || sb.Image != "" || sb.State != StateStopped {
		t.Errorf("a sandbox of version 1: %+v, %v", sb, err)
	}
	if _, err := s.UpdateSandbox(ctx, "old", func(sb *Sandbox) error {
		sb.Image = "sha256:" + strings.Repeat("0", 64)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if sb, err := s.GetSandbox(ctx, "", "old"); err != nil || sb.Image != "sha256:"+strings.Repeat("0", 64) {
		t.Errorf("its image after an update: %+v, %v", sb, err)
	}
}

// TestMigrateTier: a file of schema version 2 (before sandboxes recorded
// their tier) is migrated on open; its sandboxes read back in the
// namespace tier, the only one they could run in, and keep it.
func TestMigrateTier(t *testing.T) {
	ctx := context.Background()
	s := openOld(t, 2, `INSERT INTO sandboxes (id, tenant, state, spec, created_ns, expires_ns, last_active_ns, idle_timeout_ns, pid, pid_start, dir, image)
			VALUES ('old', 'acme', 'running', x'', 1, 2, 3, 0, 0, 0, '/x', '')`)
	if v, err := s.schemaVersion(ctx); err != nil || v != len(migrations) {
		t.Errorf("schema version %d, %v; want %d", v, err, len(migrations))
	}
	sb, err := s.GetSandbox(ctx, "acme", "old")
	if err != nil || sb.Tier != NamespaceTier || sb.State != StateRunning {
		t.Errorf("a sandbox of version 2: %+v, %v; want the namespace tier", sb, err)
	}
	if c, err := s.CountStates(ctx, ""); err != nil || c[StateTier{StateRunning, NamespaceTier}] != 1 || len(c) != 1 {
		t.Errorf("CountStates = %v, %v; want one running of the namespace tier", c, err)
	}
	if sb, err := s.UpdateSandbox(ctx, "old", func(sb *Sandbox) error {
		sb.State = StateStopped
		return nil
	}); err != nil || sb.Tier != NamespaceTier {
		t.Errorf("after an update: %+v, %v", sb, err)
	}
}

// TestMigrateCheckpoint: a file of schema version 3 (before sandboxes
// could be paused to disk) is migrated on open; its paused sandboxes
// read back paused in memory (no checkpoint), and a checkpoint can be
// recorded for them.
func TestMigrateCheckpoint(t *testing.T) {
	ctx := context.Background()
	s := openOld(t, 3, `INSERT INTO sandboxes (id, tenant, state, spec, created_ns, expires_ns, last_active_ns, idle_timeout_ns, pid, pid_start, dir, image, tier)
			VALUES ('old', 'acme', 'paused', x'', 1, 2, 3, 0, 7, 0, '/x', '', 'gvisor')`)
	sb, err := s.GetSandbox(ctx, "acme", "old")
	if err != nil || sb.Checkpoint != "" || sb.State != StatePaused {
		t.Errorf("a sandbox of version 3: %+v, %v; want paused without a checkpoint", sb, err)
	}
	if sb, err := s.UpdateSandbox(ctx, "old", func(sb *Sandbox) error {
		sb.PID, sb.Checkpoint = 0, "/x/checkpoint"
		return nil
	}); err != nil || sb.Checkpoint != "/x/checkpoint" {
		t.Errorf("after an update: %+v, %v", sb, err)
	}
}

// TestMigrateSnapshotMemory: a file of schema version 5 (before snapshots
// recorded their source's tier and saved memory) is migrated on open; its
// snapshots read back as the namespace tier's files only, and a new
// snapshot keeps both.
func TestMigrateSnapshotMemory(t *testing.T) {
	ctx := context.Background()
	s := openOld(t, 5, `INSERT INTO snapshots (id, tenant, source, root, image, layers, size, created_ns)
			VALUES ('snap-old', 'acme', 'sb-1', '', '', '["sha256:00"]', 10, 1)`)
	sn, err := s.GetSnapshot(ctx, "acme", "snap-old")
	if err != nil || sn.Tier != NamespaceTier || sn.Memory != 0 || sn.Size != 10 {
		t.Errorf("a snapshot of version 5: %+v, %v; want the namespace tier, no memory", sn, err)
	}
	if err := s.InsertSnapshot(ctx, Snapshot{ID: "snap-new", Tenant: "acme", Layers: []string{"sha256:01"},
		Tier: "gvisor", Memory: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if sn, err := s.GetSnapshot(ctx, "", "snap-new"); err != nil || sn.Tier != "gvisor" || sn.Memory != 1<<20 {
		t.Errorf("a snapshot with memory: %+v, %v", sn, err)
	}
	if err := s.InsertSnapshot(ctx, Snapshot{ID: "snap-bad", Tenant: "acme", Layers: []string{"sha256:01"}, Memory: -1}); err == nil {
		t.Error("a snapshot of negative memory was recorded")
	}
}
