package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/changes"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// Review workspaces. The operator binds host directories by name (hutch
// serve --review-workspace NAME=DIR[@TENANT,...]); a sandbox created with
// one of them (CreateRequest.ReviewWorkspace) sees the directory at its
// workspace read-write through a review overlay whose upper layer is a
// tmpfs in the sandbox's directory (reviewDir), bounded as its root layer
// is and charged to its memory: nothing it does reaches the directory.
// When the sandbox ends, what it wrote is copied into a change set of the
// daemon's store (<state>/changes, package changes), the tenant's, which a
// person reads (ChangeSetDiff) and applies to the directory or discards.

// ReviewWorkspace is a host directory sandboxes may review.
type ReviewWorkspace struct {
	// Dir is the directory (absolute).
	Dir string
	// Tenants may bind it, besides the operator (the unix socket).
	Tenants []string
}

// Names in a sandbox's directory for its review workspace.
const (
	reviewDir     = "review"     // the tmpfs of the overlay's upper layer and work directory
	reviewSetFile = "review-set" // the id of its change set
)

// reviewBinding is a create's review workspace: its name, and the change
// set made for it.
type reviewBinding struct {
	name string
	ws   ReviewWorkspace
	set  *changes.Set
	// running is set once the sandbox runs: from then on its end keeps
	// the set (finishReview); before, a failure discards it.
	running bool
}

// validWorkspaceName reports whether name may name a review workspace.
func validWorkspaceName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// ChangeSetInfo describes a change set of a served sandbox.
type ChangeSetInfo struct {
	ID      string `json:"id"`
	Tenant  string `json:"tenant"`
	Sandbox string `json:"sandbox"`
	// Workspace is the review workspace's name (hutch serve
	// --review-workspace), not its host path.
	Workspace string    `json:"workspace"`
	Created   time.Time `json:"created"`
	// Ended is when its sandbox ended (zero while it runs); Applied when
	// the set was applied whole.
	Ended   time.Time            `json:"ended,omitzero"`
	Applied time.Time            `json:"applied,omitzero"`
	Counts  map[changes.Kind]int `json:"counts,omitempty"`
	// Running says its sandbox still writes it: it is read as it is now,
	// and cannot be applied or discarded yet.
	Running bool `json:"running"`
}

// bindReview checks r's review workspace for tenant and makes its change
// set (nil without one). spec is the sandbox's policy.
func (m *Manager) bindReview(tenant string, r CreateRequest, spec policy.Spec) (*reviewBinding, error) {
	if r.ReviewWorkspace == "" {
		return nil, nil
	}
	ws, ok := m.cfg.ReviewWorkspaces[r.ReviewWorkspace]
	if !ok || (!r.Operator && !slices.Contains(ws.Tenants, tenant)) {
		return nil, invalid("create sandbox: review_workspace %q: no review workspace of that name for this tenant (the operator binds them: hutch serve --review-workspace NAME=DIR@TENANT)", r.ReviewWorkspace)
	}
	if spec.Tier != policy.TierNamespace || os.Geteuid() != 0 {
		return nil, fmt.Errorf("create sandbox: review_workspace: the %s tier of a daemon run as uid %d cannot review a workspace (the namespace tier of a daemon run as root can): %w", spec.Tier, os.Geteuid(), ErrUnsupported)
	}
	if fi, err := os.Stat(ws.Dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("create sandbox: review_workspace %q: its directory is not there any more: %w", r.ReviewWorkspace, ErrConflict)
	}
	m.reviewMu.Lock()
	defer m.reviewMu.Unlock()
	sets, err := m.changes.List()
	if err != nil {
		return nil, err
	}
	n := 0
	for _, s := range sets {
		if s.Meta().Tenant == tenant {
			n++
		}
	}
	if n >= m.cfg.MaxChangeSets {
		return nil, fmt.Errorf("create sandbox: review_workspace: the tenant has %d change sets, the most allowed (apply or discard one first): %w", n, ErrQuota)
	}
	set, err := m.changes.Create(ws.Dir)
	if err != nil {
		return nil, err
	}
	if err := set.Own(tenant, "", r.ReviewWorkspace); err != nil {
		_ = m.changes.Discard(set.ID())
		return nil, err
	}
	// Every apply of the set matches its policy's approvals.files.
	if rules, err := spec.Approvals.FileRules(); err != nil || len(rules) > 0 {
		if err == nil {
			err = set.SetFileRules(rules)
		}
		if err != nil {
			_ = m.changes.Discard(set.ID())
			return nil, fmt.Errorf("create sandbox: review_workspace: approvals.files: %w", err)
		}
	}
	return &reviewBinding{name: r.ReviewWorkspace, ws: ws, set: set}, nil
}

// startReview makes the review tmpfs of sandbox dir for b (size bytes)
// and returns the sandbox's configuration with it: the policy's workspace
// shows b's directory.
func startReview(dir string, b *reviewBinding, size int64, c *sandbox.Config) error {
	rd := filepath.Join(dir, reviewDir)
	if err := os.Mkdir(rd, 0o700); err != nil {
		return err
	}
	if err := mountReviewTmpfs(rd, size); err != nil {
		return fmt.Errorf("review workspace: %w", err)
	}
	for _, sub := range []string{"upper", "work"} {
		if err := os.Mkdir(filepath.Join(rd, sub), 0o700); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, reviewSetFile), []byte(b.set.ID()), 0o600); err != nil {
		return err
	}
	c.Spec.Filesystem.WorkspaceAt = c.Spec.Filesystem.Workspace
	c.Spec.Filesystem.Workspace = b.ws.Dir
	c.ReviewDir = rd
	return nil
}

// finishReview copies what the ended sandbox of directory dir wrote to
// its review workspace into its change set, which it ends; nothing
// without one. The sandbox's processes must be gone.
func (m *Manager) finishReview(dir string, log *slog.Logger) {
	b, err := os.ReadFile(filepath.Join(dir, reviewSetFile))
	if err != nil {
		return
	}
	set, err := m.changes.Open(strings.TrimSpace(string(b)))
	if err != nil {
		log.Error("the change set of the review workspace", "err", err)
		return
	}
	defer func() {
		m.mu.Lock()
		delete(m.reviewing, set.ID())
		m.mu.Unlock()
	}()
	if err := os.Remove(set.Upper()); err != nil && !errors.Is(err, os.ErrNotExist) {
		log.Error("the change set of the review workspace", "set", set.ID(), "err", err)
		return
	}
	if _, err := sandbox.SnapshotLayer(filepath.Join(dir, reviewDir), set.Upper(), 0); err != nil {
		log.Error("copy what the sandbox wrote to its review workspace", "set", set.ID(), "err", err)
		return
	}
	if err := set.End([]string{"sandbox " + set.Meta().Sandbox}, 0); err != nil {
		log.Error("end the change set of the review workspace", "set", set.ID(), "err", err)
		return
	}
	log.Info("change set kept", "set", set.ID(), "counts", set.Meta().Counts)
}

// withChangeSets fills in the change set of each sandbox of infos that has
// one.
func (m *Manager) withChangeSets(infos []Info) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range infos {
		infos[i].ChangeSet = m.setOf[infos[i].ID]
	}
}

// changeSet returns tenant's change set cid and, while its sandbox runs,
// the live upper directory it is read from ("" once it ended).
func (m *Manager) changeSet(tenant, cid string) (*changes.Set, string, error) {
	notFound := fmt.Errorf("change set %s: %w", cid, ErrNotFound)
	if len(cid) != 12 || strings.Trim(cid, "0123456789abcdef") != "" {
		return nil, "", notFound
	}
	set, err := m.changes.Open(cid)
	if err != nil || set.Meta().Tenant == "" || (tenant != "" && set.Meta().Tenant != tenant) {
		return nil, "", notFound
	}
	m.mu.Lock()
	live := m.reviewing[cid]
	m.mu.Unlock()
	return set, live, nil
}

// infoOfSet describes set.
func infoOfSet(set *changes.Set, live string) ChangeSetInfo {
	meta := set.Meta()
	return ChangeSetInfo{
		ID: meta.ID, Tenant: meta.Tenant, Sandbox: meta.Sandbox, Workspace: meta.ReviewWorkspace,
		Created: meta.Created, Ended: meta.Ended, Applied: meta.Applied, Counts: meta.Counts, Running: live != "",
	}
}

// ChangeSets lists tenant's change sets ("" tenant: every tenant's),
// newest first.
func (m *Manager) ChangeSets(ctx context.Context, tenant string) ([]ChangeSetInfo, error) {
	sets, err := m.changes.List()
	if err != nil {
		return nil, err
	}
	out := []ChangeSetInfo{}
	for _, s := range sets {
		meta := s.Meta()
		if meta.Tenant == "" || (tenant != "" && meta.Tenant != tenant) {
			continue
		}
		m.mu.Lock()
		live := m.reviewing[meta.ID]
		m.mu.Unlock()
		out = append(out, infoOfSet(s, live))
	}
	return out, nil
}

// GetChangeSet describes tenant's change set cid.
func (m *Manager) GetChangeSet(ctx context.Context, tenant, cid string) (ChangeSetInfo, error) {
	set, live, err := m.changeSet(tenant, cid)
	if err != nil {
		return ChangeSetInfo{}, err
	}
	return infoOfSet(set, live), nil
}

// ChangeSetDiff returns the changes of tenant's change set cid against
// its workspace as it is now (while its sandbox runs, what it has
// written so far), and the set to render them with.
func (m *Manager) ChangeSetDiff(ctx context.Context, tenant, cid string) (*changes.Set, []changes.Change, error) {
	set, live, err := m.changeSet(tenant, cid)
	if err != nil {
		return nil, nil, err
	}
	if live != "" {
		set = set.Live(live)
	}
	list, err := set.Changes()
	if err != nil {
		return nil, nil, fmt.Errorf("change set %s: %w", cid, err)
	}
	return set, list, nil
}

// ApplyChangeSet applies tenant's change set cid (the changes at or below
// paths; all when none) to its workspace, as hutch changes apply does:
// nothing when a path changed in the workspace since the sandbox saw it
// or needs the word opt.Allow gives (an *changes.ApplyError, ErrConflict).
// A set whose sandbox runs is a conflict. Only the operator may give that
// word: what it lets through — a git hook, an rc file, a setuid bit on a
// file the daemon makes the directory owner's, a link out — is what the
// host runs or follows later, which a tenant must not decide.
func (m *Manager) ApplyChangeSet(ctx context.Context, tenant, cid string, paths []string, opt changes.ApplyOptions, operator bool) (*changes.Result, error) {
	set, live, err := m.changeSet(tenant, cid)
	if err != nil {
		return nil, err
	}
	if len(opt.Allow) > 0 && !operator {
		return nil, invalid("change set %s: allow: only the daemon's operator (its unix socket) may apply protected names, links out of the workspace and set-id bits; apply the rest with skip_refused", cid)
	}
	if live != "" {
		return nil, fmt.Errorf("change set %s: its sandbox %s still runs; end it first: %w", cid, set.Meta().Sandbox, ErrConflict)
	}
	m.reviewMu.Lock()
	defer m.reviewMu.Unlock()
	list, err := set.Changes()
	if err != nil {
		return nil, fmt.Errorf("change set %s: %w", cid, err)
	}
	if _, err := changes.Filter(list, paths); err != nil {
		return nil, invalid("change set %s: %v", cid, err)
	}
	opt.Paths = paths
	if opt.Gate == nil {
		// Where the policy's approvals.files say ask, the tenant is
		// asked as for its sandbox's commands (GET /v1/approvals),
		// while this call waits.
		sb := set.Meta().Sandbox
		defer m.askingFor(tenant, sb)()
		opt.Gate = m.brokerGate(sb, m.log.With("sandbox", sb, "tenant", tenant))
		opt.Context = ctx
	}
	res, err := set.Apply(list, opt)
	var aerr *changes.ApplyError
	if errors.As(err, &aerr) {
		return res, fmt.Errorf("change set %s: %w: %w", cid, err, ErrConflict)
	}
	if err != nil {
		return res, fmt.Errorf("change set %s: %w", cid, err)
	}
	m.log.Info("change set applied", "set", cid, "tenant", tenant, "workspace", set.Workspace())
	return res, nil
}

// DiscardChangeSet removes tenant's change set cid; one whose sandbox
// runs is a conflict.
func (m *Manager) DiscardChangeSet(ctx context.Context, tenant, cid string) error {
	set, live, err := m.changeSet(tenant, cid)
	if err != nil {
		return err
	}
	if live != "" {
		return fmt.Errorf("change set %s: its sandbox %s still runs; end it first: %w", cid, set.Meta().Sandbox, ErrConflict)
	}
	m.reviewMu.Lock()
	defer m.reviewMu.Unlock()
	if err := m.changes.Discard(cid); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.setOf, set.Meta().Sandbox)
	m.mu.Unlock()
	return nil
}

// Reviewer is what a front end needs for the change sets of review
// workspaces; *Manager implements it.
type Reviewer interface {
	ChangeSets(ctx context.Context, tenant string) ([]ChangeSetInfo, error)
	GetChangeSet(ctx context.Context, tenant, cid string) (ChangeSetInfo, error)
	ChangeSetDiff(ctx context.Context, tenant, cid string) (*changes.Set, []changes.Change, error)
	ApplyChangeSet(ctx context.Context, tenant, cid string, paths []string, opt changes.ApplyOptions, operator bool) (*changes.Result, error)
	DiscardChangeSet(ctx context.Context, tenant, cid string) error
}

var _ Reviewer = (*Manager)(nil)
