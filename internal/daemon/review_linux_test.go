package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/changes"
)

// TestReviewWorkspace: a sandbox bound to a review workspace sees the
// host directory at its workspace and writes a change set, never the
// directory; only the tenants the operator named may bind it; the set is
// read while the sandbox runs, applied or discarded once it ended, and
// an apply over a file edited meanwhile applies nothing. Another tenant
// sees none of it.
func TestReviewWorkspace(t *testing.T) {
	host := t.TempDir()
	for name, content := range map[string]string{"keep.txt": "keep\n", "edit.txt": "old\n", "gone.txt": "gone\n"} {
		if err := os.WriteFile(filepath.Join(host, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := newManager(t, Config{ReviewWorkspaces: map[string]ReviewWorkspace{"app": {Dir: host, Tenants: []string{"a"}}}})
	ctx := testCtx(t)
	for _, c := range []struct {
		tenant, name string
	}{{"b", "app"}, {"a", "nope"}} {
		if _, err := m.Create(ctx, c.tenant, CreateRequest{ReviewWorkspace: c.name}); !errors.Is(err, ErrInvalid) || strings.Contains(err.Error(), host) {
			t.Errorf("tenant %s binds %q: %v", c.tenant, c.name, err)
		}
	}
	info := mustCreate(t, m, "a", CreateRequest{ReviewWorkspace: "app"})
	if info.ChangeSet == "" {
		t.Fatalf("the sandbox names no change set: %+v", info)
	}
	out := mustRun(t, m, "a", info.ID, `set -e; pwd; cat keep.txt; echo new > edit.txt; rm gone.txt; echo added > new.txt; mkdir d; echo deep > d/f`)
	if out != info.Workspace+"\nkeep\n" {
		t.Errorf("the sandbox: %q", out)
	}
	for name, want := range map[string]string{"keep.txt": "keep\n", "edit.txt": "old\n", "gone.txt": "gone\n", "new.txt": ""} {
		b, err := os.ReadFile(filepath.Join(host, name))
		if string(b) != want || (want == "" && err == nil) {
			t.Errorf("the host's %s: %q, %v", name, b, err)
		}
	}

	// While it runs: read, not applied.
	sets, err := m.ChangeSets(ctx, "a")
	if err != nil || len(sets) != 1 || sets[0].ID != info.ChangeSet || !sets[0].Running || sets[0].Workspace != "app" || sets[0].Sandbox != info.ID {
		t.Fatalf("change sets: %+v, %v", sets, err)
	}
	if got, err := m.Get(ctx, "a", info.ID); err != nil || got.ChangeSet != info.ChangeSet {
		t.Errorf("get: %+v, %v", got, err)
	}
	_, list, err := m.ChangeSetDiff(ctx, "a", info.ChangeSet)
	if got := kindsOf(list); err != nil || got != "added d, added d/f, modified edit.txt, deleted gone.txt, added new.txt" {
		t.Errorf("the running set's changes: %s (%v)", got, err)
	}
	if _, err := m.ApplyChangeSet(ctx, "a", info.ChangeSet, nil, changes.ApplyOptions{}, false); !errors.Is(err, ErrConflict) {
		t.Errorf("apply while the sandbox runs: %v", err)
	}
	// Another tenant: not found, as an unknown set.
	for _, f := range []func() error{
		func() error { _, err := m.GetChangeSet(ctx, "b", info.ChangeSet); return err },
		func() error { _, _, err := m.ChangeSetDiff(ctx, "b", info.ChangeSet); return err },
		func() error {
			_, err := m.ApplyChangeSet(ctx, "b", info.ChangeSet, nil, changes.ApplyOptions{}, false)
			return err
		},
		func() error { return m.DiscardChangeSet(ctx, "b", info.ChangeSet) },
	} {
		if err := f(); !errors.Is(err, ErrNotFound) {
			t.Errorf("another tenant's call: %v", err)
		}
	}
	if sets, _ := m.ChangeSets(ctx, "b"); len(sets) != 0 {
		t.Errorf("tenant b lists %+v", sets)
	}

	if err := m.Destroy(ctx, "a", info.ID); err != nil {
		t.Fatal(err)
	}
	got, err := m.GetChangeSet(ctx, "a", info.ChangeSet)
	if err != nil || got.Running || got.Ended.IsZero() || got.Counts[changes.Added] != 2 || got.Counts[changes.Modified] != 1 || got.Counts[changes.Deleted] != 1 {
		t.Fatalf("the ended set: %+v, %v", got, err)
	}
	// The host's edit.txt changed meanwhile: nothing applied.
	if err := os.WriteFile(filepath.Join(host, "edit.txt"), []byte("theirs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var aerr *changes.ApplyError
	if _, err := m.ApplyChangeSet(ctx, "a", info.ChangeSet, nil, changes.ApplyOptions{}, false); !errors.As(err, &aerr) || !errors.Is(err, ErrConflict) || len(aerr.Conflicts) != 1 {
		t.Fatalf("apply over an edited file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(host, "new.txt")); err == nil {
		t.Error("an apply with a conflict wrote new.txt")
	}
	// A tenant's word does not let a git hook or a set-id bit through
	// (what the host runs later): only the operator's does.
	if _, err := m.ApplyChangeSet(ctx, "a", info.ChangeSet, []string{"d", "new.txt"}, changes.ApplyOptions{Allow: []string{"."}}, false); !errors.Is(err, ErrInvalid) {
		t.Errorf("a tenant's apply with allow: %v", err)
	}
	if _, err := m.ApplyChangeSet(ctx, "a", info.ChangeSet, []string{"d", "new.txt"}, changes.ApplyOptions{}, false); err != nil {
		t.Fatalf("apply of d and new.txt: %v", err)
	}
	for name, want := range map[string]string{"new.txt": "added\n", "d/f": "deep\n", "edit.txt": "theirs\n", "gone.txt": "gone\n"} {
		if b, err := os.ReadFile(filepath.Join(host, name)); string(b) != want {
			t.Errorf("after the apply, the host's %s: %q, %v", name, b, err)
		}
	}
	if err := m.DiscardChangeSet(ctx, "a", info.ChangeSet); err != nil {
		t.Fatal(err)
	}
	if _, err := m.GetChangeSet(ctx, "a", info.ChangeSet); !errors.Is(err, ErrNotFound) {
		t.Errorf("a discarded set: %v", err)
	}
}

// kindsOf is "KIND PATH, …" of list.
func kindsOf(list []changes.Change) string {
	var out []string
	for _, c := range list {
		out = append(out, string(c.Kind)+" "+c.Path)
	}
	return strings.Join(out, ", ")
}
