package runner

import (
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"slices"

	"github.com/hutch-sandbox/hutch/internal/approve"
	"github.com/hutch-sandbox/hutch/internal/changes"
	"github.com/hutch-sandbox/hutch/internal/policy"
)

// Review is the change set of a run in review mode (hutch run --review):
// made before the sandbox starts (or, with --continue, the earlier set the
// run goes on from), its directory given to the sandbox as
// sandbox.Config.ReviewDir, and recorded and summarised when the command
// has ended.
type Review struct {
	set       *changes.Set
	store     *changes.Store
	fresh     bool // made for this run: discarded again when nothing changed
	discarded bool
}

// BeginReview opens the change set of a review-mode run of spec: rf's
// --continue set, which must be of the same workspace, or a new one. nil
// when spec is not in review mode.
func (rf *Flags) BeginReview(spec policy.Spec) (*Review, error) {
	if spec.Filesystem.WorkspaceMode != policy.WorkspaceReview && rf.Continue == "" {
		return nil, nil
	}
	store, err := changes.DefaultStore()
	if err != nil {
		return nil, fmt.Errorf("review mode: %w", err)
	}
	r := &Review{store: store}
	if rf.Continue != "" {
		if r.set, err = store.Open(rf.Continue); err != nil {
			return nil, fmt.Errorf("--continue: %w", err)
		}
		ws, err := filepath.EvalSymlinks(spec.Filesystem.Workspace)
		if err != nil {
			return nil, fmt.Errorf("--continue: workspace: %w", err)
		}
		if ws != r.set.Workspace() {
			return nil, fmt.Errorf("--continue: change set %s is of the workspace %s, not %s: run hutch there, or with --workspace %s", r.set.ID(), r.set.Workspace(), ws, r.set.Workspace())
		}
		if !r.set.Meta().Applied.IsZero() {
			return nil, fmt.Errorf("--continue: change set %s was applied already: start a new one with --review", r.set.ID())
		}
	} else {
		if r.set, err = store.Create(spec.Filesystem.Workspace); err != nil {
			return nil, fmt.Errorf("review mode: %w", err)
		}
		r.fresh = true
	}
	if err := r.set.Begin(); err != nil {
		r.abort()
		return nil, fmt.Errorf("review mode: %w", err)
	}
	// The policy's file rules go with the set, where the sandbox cannot
	// write, for whoever applies it; a continued set keeps its own too.
	rules, err := spec.Approvals.FileRules()
	if err != nil {
		r.abort()
		return nil, fmt.Errorf("review mode: %w", err)
	}
	if len(rules) > 0 {
		all := slices.Clone(r.set.Meta().FileRules)
		for _, fr := range rules {
			if !slices.ContainsFunc(all, func(o approve.FileRule) bool { return reflect.DeepEqual(o, fr) }) {
				all = append(all, fr)
			}
		}
		if err := r.set.SetFileRules(all); err != nil {
			r.abort()
			return nil, fmt.Errorf("review mode: %w", err)
		}
	}
	return r, nil
}

// Again records the start of one more run on the set (hutch mcp's next
// session sandbox).
func (r *Review) Again() error { return r.set.Begin() }

// Discarded reports whether End discarded the set (made for its run, it
// held nothing).
func (r *Review) Discarded() bool { return r.discarded }

// Dir is the change set's directory, for sandbox.Config.ReviewDir.
func (r *Review) Dir() string { return r.set.Dir() }

// Abort discards a set made for this run when the sandbox could not run
// at all.
func (r *Review) Abort() { r.abort() }

func (r *Review) abort() {
	if r.fresh {
		r.discarded = r.store.Discard(r.set.ID()) == nil
	}
}

// End records the run (command, its exit code, the base of what it
// changed) and says on w what the set holds now. A set made for this run
// that holds nothing is discarded.
func (r *Review) End(command []string, exitCode int, w io.Writer) {
	if err := r.set.End(command, exitCode); err != nil {
		fmt.Fprintf(w, "hutch: change set %s: %v\n", r.set.ID(), err)
		return
	}
	ch, err := r.set.Changes()
	if err != nil {
		fmt.Fprintf(w, "hutch: change set %s: %v\n", r.set.ID(), err)
		return
	}
	fmt.Fprintln(w, changes.Summary(r.set.ID(), ch))
	if len(ch) == 0 && r.fresh {
		r.discarded = r.store.Discard(r.set.ID()) == nil
	}
	if edited := r.set.Meta().Edited; len(edited) > 0 {
		fmt.Fprintf(w, "hutch: warning: changed in the workspace while the command ran: %s; hutch changes apply will refuse them as conflicts\n", quoteList(edited, 5))
	}
}

// quoteList lists up to n of paths, and how many more there are.
func quoteList(paths []string, n int) string {
	out := ""
	for i, p := range paths {
		if i == n {
			return out + fmt.Sprintf(" and %d more", len(paths)-n)
		}
		if i > 0 {
			out += ", "
		}
		out += p
	}
	return out
}
