package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStateKey: E2B's key is made once, 0600, and read back the same; a
// file of another size is an error naming it.
func TestStateKey(t *testing.T) {
	file := filepath.Join(t.TempDir(), "e2b.key")
	k1, err := stateKey(file, 32)
	if err != nil || len(k1) != 32 {
		t.Fatalf("first: %d bytes, %v", len(k1), err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the key's file: %v %v", fi.Mode(), err)
	}
	if k2, err := stateKey(file, 32); err != nil || string(k2) != string(k1) {
		t.Errorf("again: another key, or %v", err)
	}
	if _, err := stateKey(file, 16); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("a key of another size: %v", err)
	}
}
