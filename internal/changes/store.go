package changes

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/approve"
)

// Store is a directory of change sets.
type Store struct {
	dir string
}

// DefaultStore returns the store in $XDG_STATE_HOME/hutch/changes
// (~/.local/state/hutch/changes by default), a directory sandboxes are
// denied by the policy's defaults.
func DefaultStore() (*Store, error) {
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" || !filepath.IsAbs(base) {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, fmt.Errorf("change sets: no home directory: %w", err)
		}
		base = filepath.Join(home, ".local", "state")
	}
	return NewStore(filepath.Join(base, "hutch", "changes")), nil
}

// NewStore returns the store in dir; the directory is made (0700) when a
// set is created.
func NewStore(dir string) *Store { return &Store{dir: dir} }

// Dir returns the store's directory.
func (st *Store) Dir() string { return st.dir }

// idLen is the length of an ID: 12 lowercase hex digits.
const idLen = 12

// Set is one change set.
type Set struct {
	dir  string
	meta Meta
	// upper, when set, is where the set is read from instead (Live).
	upper string
	// Sides are the workspace (old) and the upper directory (new).
	Sides
}

// Meta is a set's meta.json. Fields hutch does not know are kept when it
// rewrites the file.
type Meta struct {
	ID        string    `json:"id"`
	Workspace string    `json:"workspace"` // absolute, symbolic links resolved
	Created   time.Time `json:"created"`
	Started   time.Time `json:"started,omitzero"` // the last run's start
	Ended     time.Time `json:"ended,omitzero"`
	Command   []string  `json:"command,omitempty"`
	ExitCode  int       `json:"exit_code"`
	Runs      int       `json:"runs"`
	// Base is the workspace's state of every changed path when a run
	// ended (the first run that changed it), the state apply requires.
	Base map[string]Entry `json:"base,omitempty"`
	// Edited lists the changed paths whose workspace copy changed while a
	// run went on (its ctime after the run's start).
	Edited []string `json:"edited_during_run,omitempty"`
	// Counts are the set's counts by kind when the last run ended.
	Counts map[Kind]int `json:"counts,omitempty"`
	// Applied is when the whole set was applied to its workspace, and
	// Branch the git branch it was committed on.
	Applied time.Time `json:"applied,omitzero"`
	Branch  string    `json:"branch,omitempty"`
	// Tenant and Sandbox are, for a set of hutch serve, the tenant it
	// belongs to and the sandbox that wrote it.
	Tenant  string `json:"tenant,omitempty"`
	Sandbox string `json:"sandbox,omitempty"`
	// ReviewWorkspace is the name its daemon's operator gave the
	// workspace (hutch serve --review-workspace).
	ReviewWorkspace string `json:"review_workspace,omitempty"`
	// FileRules are the approvals.files rules of the policy of the set's
	// runs (SetFileRules), which every apply of the set matches.
	FileRules []approve.FileRule `json:"file_rules,omitempty"`

	extra map[string]json.RawMessage
}

// Entry is the state of one path: in the workspace, in a base or in the
// upper directory.
type Entry struct {
	Type   Type   `json:"type"`           // "" when absent
	Mode   uint32 `json:"mode,omitempty"` // permission, setuid, setgid and sticky bits
	Size   int64  `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"` // regular files
	Link   string `json:"link,omitempty"`   // symbolic links: the target

	ino, dev uint64
	nlink    uint64
	ctime    time.Time
}

// Type is the type of a path's entry.
type Type string

// The types of entries.
const (
	Absent  Type = ""
	File    Type = "file"
	Dir     Type = "dir"
	Symlink Type = "symlink"
	Device  Type = "device" // a character or block device other than a whiteout
	Fifo    Type = "fifo"
	Socket  Type = "socket"
)

// Create makes a new, empty set for workspace.
func (st *Store) Create(workspace string) (*Set, error) {
	ws, err := filepath.Abs(workspace)
	if err == nil {
		ws, err = filepath.EvalSymlinks(ws)
	}
	if err != nil {
		return nil, fmt.Errorf("change set: workspace %s: %w", workspace, err)
	}
	if err := os.MkdirAll(st.dir, 0o700); err != nil {
		return nil, fmt.Errorf("change sets: %w", err)
	}
	if err := os.Chmod(st.dir, 0o700); err != nil {
		return nil, fmt.Errorf("change sets: %w", err)
	}
	for range 8 {
		var b [idLen / 2]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		id := hex.EncodeToString(b[:])
		dir := filepath.Join(st.dir, id)
		if err := os.Mkdir(dir, 0o700); errors.Is(err, fs.ErrExist) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("change set: %w", err)
		}
		s := &Set{dir: dir, meta: Meta{ID: id, Workspace: ws, Created: time.Now()}}
		s.Sides = Sides{Old: Tree(ws), New: Tree(s.Upper())}
		for _, sub := range []string{"upper", "work"} {
			if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
				os.RemoveAll(dir)
				return nil, fmt.Errorf("change set: %w", err)
			}
		}
		if err := s.save(); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		return s, nil
	}
	return nil, errors.New("change set: no free ID")
}

// Open opens the set whose ID is id or starts with it, as git takes a
// commit's prefix.
func (st *Store) Open(id string) (*Set, error) {
	id = strings.ToLower(id)
	if id == "" || len(id) > idLen || strings.Trim(id, "0123456789abcdef") != "" {
		return nil, fmt.Errorf("change set %q: not an ID (up to %d hex digits)", id, idLen)
	}
	ids, err := st.ids()
	if err != nil {
		return nil, err
	}
	var match []string
	for _, x := range ids {
		if strings.HasPrefix(x, id) {
			match = append(match, x)
		}
	}
	switch len(match) {
	case 0:
		return nil, fmt.Errorf("change set %s: unknown ID (hutch changes ls lists them)", id)
	case 1:
		return st.load(match[0])
	default:
		slices.Sort(match)
		return nil, fmt.Errorf("change set %s: ambiguous prefix, matches %s", id, strings.Join(match, ", "))
	}
}

// ids lists the IDs of the store's sets.
func (st *Store) ids() ([]string, error) {
	ents, err := os.ReadDir(st.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("change sets: %w", err)
	}
	var ids []string
	for _, e := range ents {
		if n := e.Name(); e.IsDir() && len(n) == idLen && strings.Trim(n, "0123456789abcdef") == "" {
			ids = append(ids, n)
		}
	}
	return ids, nil
}

// List returns the store's sets, newest first. A set whose meta.json
// cannot be read is left out.
func (st *Store) List() ([]*Set, error) {
	ids, err := st.ids()
	if err != nil {
		return nil, err
	}
	var sets []*Set
	for _, id := range ids {
		if s, err := st.load(id); err == nil {
			sets = append(sets, s)
		}
	}
	slices.SortFunc(sets, func(a, b *Set) int { return b.meta.Created.Compare(a.meta.Created) })
	return sets, nil
}

// load reads set id.
func (st *Store) load(id string) (*Set, error) {
	dir := filepath.Join(st.dir, id)
	b, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		return nil, fmt.Errorf("change set %s: %w", id, err)
	}
	s := &Set{dir: dir}
	if err := json.Unmarshal(b, &s.meta); err != nil {
		return nil, fmt.Errorf("change set %s: meta.json: %w", id, err)
	}
	if err := json.Unmarshal(b, &s.meta.extra); err != nil {
		return nil, fmt.Errorf("change set %s: meta.json: %w", id, err)
	}
	if s.meta.ID != id || !filepath.IsAbs(s.meta.Workspace) {
		return nil, fmt.Errorf("change set %s: meta.json names another set or no absolute workspace", id)
	}
	s.Sides = Sides{Old: Tree(s.meta.Workspace), New: Tree(s.Upper())}
	return s, nil
}

// save writes meta.json atomically, keeping the fields it does not know.
func (s *Set) save() error {
	known, err := json.Marshal(s.meta)
	if err != nil {
		return err
	}
	out := map[string]json.RawMessage{}
	for k, v := range s.meta.extra {
		out[k] = v
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(known, &fields); err != nil {
		return err
	}
	for _, k := range []string{"started", "ended", "command", "base", "edited_during_run", "counts", "applied", "branch"} {
		delete(out, k) // omitted now: not kept from before
	}
	for k, v := range fields {
		out[k] = v
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(s.dir, ".meta.json.tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("change set %s: %w", s.meta.ID, err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, "meta.json")); err != nil {
		return fmt.Errorf("change set %s: %w", s.meta.ID, err)
	}
	return nil
}

// ID returns the set's ID.
func (s *Set) ID() string { return s.meta.ID }

// Upper returns the set's overlayfs upper directory.
func (s *Set) Upper() string {
	if s.upper != "" {
		return s.upper
	}
	return filepath.Join(s.dir, "upper")
}

// Work returns the set's overlayfs work directory.
func (s *Set) Work() string { return filepath.Join(s.dir, "work") }

// Workspace returns the workspace the set changes.
func (s *Set) Workspace() string { return s.meta.Workspace }

// Dir returns the set's directory.
func (s *Set) Dir() string { return s.dir }

// Meta returns a copy of the set's meta data.
func (s *Set) Meta() Meta { return s.meta }

// Own records the tenant, the sandbox and the review workspace's name of
// a set of hutch serve.
func (s *Set) Own(tenant, sandbox, workspace string) error {
	s.meta.Tenant, s.meta.Sandbox, s.meta.ReviewWorkspace = tenant, sandbox, workspace
	return s.save()
}

// Live returns s reading its changes from upper instead of its own upper
// directory (the upper layer of a running sandbox's overlay): for
// Changes and the renderers, not to apply or end.
func (s *Set) Live(upper string) *Set {
	c := *s
	c.upper = upper
	c.Sides = Sides{Old: Tree(s.meta.Workspace), New: Tree(upper)}
	return &c
}

// Begin records the start of a run on the set.
func (s *Set) Begin() error {
	s.meta.Started = time.Now()
	s.meta.Runs++
	return s.save()
}

// End records the end of a run: its command and exit code, the base of
// every changed path not yet in the base (the workspace as it is now), and
// the changed paths whose workspace copy changed since the run started.
func (s *Set) End(command []string, exitCode int) error {
	s.meta.Ended = time.Now()
	s.meta.Command = slices.Clone(command)
	s.meta.ExitCode = exitCode
	ch, err := s.Changes()
	if err != nil {
		s.save()
		return err
	}
	if s.meta.Base == nil {
		s.meta.Base = map[string]Entry{}
	}
	edited := map[string]bool{}
	for _, p := range s.meta.Edited {
		edited[p] = true
	}
	for _, c := range ch {
		for _, p := range c.paths() {
			if p == c.From {
				s.addBase(p, c.FromOld, edited)
			} else {
				s.addBase(p, c.Old, edited)
			}
		}
	}
	s.meta.Edited = s.meta.Edited[:0]
	for p := range edited {
		s.meta.Edited = append(s.meta.Edited, p)
	}
	slices.Sort(s.meta.Edited)
	s.meta.Counts = Count(ch)
	return s.save()
}

// addBase records e as the base of p unless p has one, and flags p when
// its workspace copy changed after the run started.
func (s *Set) addBase(p string, e Entry, edited map[string]bool) {
	if e.Type != Absent && !s.meta.Started.IsZero() && e.ctime.After(s.meta.Started) {
		edited[p] = true
	}
	if _, ok := s.meta.Base[p]; !ok {
		s.meta.Base[p] = e
	}
}

// Discard removes set id and the temporary files an interrupted apply of
// it left in its workspace. What cannot be removed (files the sandbox's
// other ids own) is named in the error.
func (st *Store) Discard(id string) error {
	s, err := st.Open(id)
	if err != nil {
		return err
	}
	if ch, err := s.Changes(); err == nil {
		s.cleanTemps(ch)
	}
	return removeAll(s.dir)
}
