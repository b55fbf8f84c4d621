// Package store keeps the state of hutch's daemon (`hutch serve`) in one
// embedded SQLite file: the tenants' API tokens and their sandboxes.
//
// The file is opened in WAL mode, so readers never wait for the writer.
// A Store holds two connection pools on it: a single writing connection,
// through which every write goes (writes are serialized in the process
// rather than by SQLite's busy handler, and a read-modify-write such as
// UpdateSandbox is one IMMEDIATE transaction), and a few read-only
// connections for lookups and listings. Each connection has foreign keys
// enforced and a busy timeout, for the case where another process holds
// the file's write lock.
//
// The schema is versioned: the table schema_migrations records each
// migration applied, and Open applies the missing ones in order. The file
// also carries SQLite's application_id, so that Open can tell a hutch state
// file from a foreign SQLite database and refuse the latter.
//
// A sandbox's labels are rows of a child table, sandbox_labels, indexed on
// (key, value, sandbox_id): ListSandboxes finds the sandboxes that have a
// label through that index, and reads each sandbox's labels back as one JSON
// object (json_group_object). Every statement takes its values as
// parameters; the only SQL text built at run time is ListSandboxes', made
// of constant fragments, one per condition.
//
// Times are stored as UTC Unix nanoseconds, durations as nanoseconds; the
// zero time.Time is stored as 0 and read back as the zero time.Time. Times
// read back are in UTC and carry no monotonic clock reading, so compare
// them with time.Time.Equal.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// ErrNotFound is returned, wrapped, when a token or a sandbox does not exist
// (or belongs to another tenant).
var ErrNotFound = errors.New("not found")

// ErrConflict is returned, wrapped, when a sandbox with the same ID already
// exists.
var ErrConflict = errors.New("conflict")

const (
	// applicationID marks a hutch state file in its SQLite header
	// (PRAGMA application_id); it spells "HUTC".
	applicationID = 0x48555443
	// setApplicationID sets it (a pragma takes no parameter).
	setApplicationID = "PRAGMA application_id = 1213551683"
	// busyTimeoutMillis is how long a connection waits for a lock held by
	// another process before it fails with SQLITE_BUSY.
	busyTimeoutMillis = 5000
	// maxReaders bounds the read-only pool.
	maxReaders = 8
)

// Store is the daemon's state: tenants' tokens and sandboxes. It is safe for
// concurrent use.
type Store struct {
	path string
	// w is the writing pool: exactly one connection, whose transactions
	// begin IMMEDIATE.
	w *sql.DB
	// r is the reading pool: query_only connections.
	r *sql.DB
}

// Open opens the state file at path, creating it (mode 0600) and its schema
// if it is missing, and applies pending schema migrations. The directory must
// exist. Open fails with a descriptive error when the file is not an SQLite
// database, is an SQLite database of another application, is corrupt, or has
// a schema newer than this version of hutch knows.
func Open(path string) (*Store, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("store: open %q: %w", path, err)
	}
	// SQLite would create the file with mode 0644 (less the umask); create
	// it first so that it is private. SQLite gives the -wal and -shm files
	// the database file's mode. An existing file keeps its mode.
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: open %q: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("store: open %q: %w", path, err)
	}

	w, err := openPool(abs, false)
	if err != nil {
		return nil, fmt.Errorf("store: open %q: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxIdleTime(0)
	w.SetConnMaxLifetime(0)

	s := &Store{path: abs, w: w}
	if err := s.prepare(context.Background()); err != nil {
		w.Close()
		return nil, fmt.Errorf("store: open %q: %w", path, err)
	}

	r, err := openPool(abs, true)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("store: open %q: %w", path, err)
	}
	n := min(runtime.GOMAXPROCS(0)*2, maxReaders)
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	s.r = r
	return s, nil
}

// openPool returns a pool on the database file abs (it opens no connection
// yet). The connections of a read-only pool have query_only set; those of
// the writing pool begin their transactions IMMEDIATE, so that a
// read-modify-write transaction holds the write lock from its start.
func openPool(abs string, readOnly bool) (*sql.DB, error) {
	q := url.Values{}
	q.Set("_busy_timeout", fmt.Sprint(busyTimeoutMillis))
	q.Set("_foreign_keys", "1")
	if readOnly {
		q.Set("_query_only", "1")
	} else {
		// In WAL mode, NORMAL keeps the file consistent on a crash of
		// the process or of the machine; a power loss may undo the last
		// transactions.
		q.Set("_synchronous", "NORMAL")
		q.Set("_txlock", "immediate")
	}
	// A file: URI with the path escaped, so that a '?' or '#' in the path
	// is not taken for the start of the parameters.
	u := url.URL{Scheme: "file", Path: abs, RawQuery: q.Encode()}
	c, err := sqlite.NewConnector(u.String())
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(c), nil
}

// prepare checks that the file is a hutch state file (or empty), switches it to
// WAL mode, checks its integrity and migrates its schema.
func (s *Store) prepare(ctx context.Context) error {
	var appID int64
	if err := s.w.QueryRowContext(ctx, "PRAGMA application_id").Scan(&appID); err != nil {
		return describe(err)
	}
	var objects int
	if err := s.w.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema").Scan(&objects); err != nil {
		return describe(err)
	}
	switch {
	case appID == applicationID:
	case appID == 0 && objects == 0:
		// A new file; migrate sets the application ID.
	default:
		return fmt.Errorf("not a hutch state file: an SQLite database of another application (application_id %#x, %d schema objects)", appID, objects)
	}

	var mode string
	if err := s.w.QueryRowContext(ctx, "PRAGMA journal_mode=WAL").Scan(&mode); err != nil {
		return fmt.Errorf("set WAL mode: %w", describe(err))
	}
	if mode != "wal" {
		return fmt.Errorf("set WAL mode: journal mode is still %q", mode)
	}

	if err := s.quickCheck(ctx); err != nil {
		return err
	}
	return s.migrate(ctx)
}

// quickCheck runs SQLite's quick_check, which reads every page of the file:
// it is linear in the file's size, which for the daemon's state is small.
func (s *Store) quickCheck(ctx context.Context) error {
	rows, err := s.w.QueryContext(ctx, "PRAGMA quick_check")
	if err != nil {
		return describe(err)
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return describe(err)
		}
		if line != "ok" && len(problems) < 5 {
			problems = append(problems, line)
		}
	}
	if err := rows.Err(); err != nil {
		return describe(err)
	}
	if len(problems) > 0 {
		return fmt.Errorf("the database file is corrupt: %q", problems)
	}
	return nil
}

// describe turns the SQLite errors that a damaged or foreign file causes
// into a sentence that says so; it returns other errors unchanged.
func describe(err error) error {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return err
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_NOTADB:
		return fmt.Errorf("not a hutch state file: not an SQLite database: %w", err)
	case sqlite3.SQLITE_CORRUPT:
		return fmt.Errorf("the database file is corrupt: %w", err)
	}
	return err
}

// isConstraint reports whether err is the violation of a primary key or a
// unique constraint.
func isConstraint(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	c := se.Code()
	return c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || c == sqlite3.SQLITE_CONSTRAINT_UNIQUE
}

// Close closes the store's connections. The last connection to close
// checkpoints the WAL into the database file and removes it.
func (s *Store) Close() error {
	err := errors.Join(s.r.Close(), s.w.Close())
	if err != nil {
		return fmt.Errorf("store: close %q: %w", s.path, err)
	}
	return nil
}

// writeTx runs fn in a transaction on the writing connection, which begins
// IMMEDIATE, and commits it if fn returns nil.
func (s *Store) writeTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
