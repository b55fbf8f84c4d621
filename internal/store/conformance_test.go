package store_test

import (
	"path/filepath"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/store/storetest"
)

// TestConformance runs the suite of every Backend against the SQLite
// store, each Backend of a state a Store of the same file.
func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Backends{
		New: func(t *testing.T) func(*testing.T) store.Backend {
			path := filepath.Join(t.TempDir(), "state.db")
			return func(t *testing.T) store.Backend {
				st, err := store.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st.Close() })
				return st
			}
		},
		Snapshots: true,
	})
}
