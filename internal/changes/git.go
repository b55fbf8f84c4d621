package changes

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ApplyBranch commits changes on a new branch name of the git repository
// the workspace is in, its parent HEAD, without touching the working tree
// or the index: git's plumbing on an index of its own. Changes that need
// the user's word are treated as by Apply; an existing branch is refused.
// It returns the commit's ID.
//
// It runs the user's own git (with the user's configuration: the
// committer's name, the object format, hooks do not run for plumbing):
// nothing of git is linked into hutch, and what the branch holds is what
// the user's git would have made of the same files.
func (s *Set) ApplyBranch(changes []Change, name string, opt ApplyOptions) (string, *Result, error) {
	all := len(opt.Paths) == 0
	changes, err := Filter(changes, opt.Paths)
	if err != nil {
		return "", nil, err
	}
	ws := s.meta.Workspace
	g := &gitRun{dir: ws}
	prefix, err := g.out(nil, "rev-parse", "--show-prefix")
	if err != nil {
		return "", nil, fmt.Errorf("workspace %s is not in a git repository (%v)", ws, err)
	}
	if _, err := g.out(nil, "check-ref-format", "--branch", name); err != nil {
		return "", nil, fmt.Errorf("%q is not a valid branch name", name)
	}
	if _, err := g.out(nil, "rev-parse", "--verify", "--quiet", "refs/heads/"+name); err == nil {
		return "", nil, fmt.Errorf("branch %s exists already; choose another name", name)
	}
	head, err := g.out(nil, "rev-parse", "--verify", "HEAD^{commit}")
	if err != nil {
		return "", nil, fmt.Errorf("the repository has no commit yet to branch from: %v", err)
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		return "", nil, err
	}
	defer root.Close()
	todo, res, aerr := s.sortOut(root, changes, opt)
	if len(aerr.Refused) > 0 {
		return "", nil, aerr
	}
	if err := s.checkFiles(todo, opt); err != nil {
		return "", nil, err
	}
	tmp, err := os.MkdirTemp("", "hutch-branch-")
	if err != nil {
		return "", nil, err
	}
	defer os.RemoveAll(tmp)
	g.env = []string{"GIT_INDEX_FILE=" + filepath.Join(tmp, "index")}
	if _, err := g.out(nil, "read-tree", head); err != nil {
		return "", nil, err
	}
	var info bytes.Buffer
	for _, c := range todo {
		for _, gone := range []struct {
			p string
			e Entry
		}{{c.From, c.FromOld}, {c.Path, c.Old}} {
			if gone.p != "" && (gone.e.Type == File || gone.e.Type == Symlink) && (gone.p == c.From || c.New.Type != c.Old.Type) {
				fmt.Fprintf(&info, "0 %s\t%s\x00", zeroID, prefix+gone.p)
			}
		}
		if c.New.Type != File && c.New.Type != Symlink {
			continue
		}
		var content io.Reader = strings.NewReader(c.New.Link)
		if c.New.Type == File {
			f, err := openBeneath(s.Upper(), c.Path)
			if err != nil {
				return "", nil, fmt.Errorf("%s: %w", c.Path, err)
			}
			defer f.Close()
			content = f
		}
		id, err := g.out(content, "hash-object", "-w", "--no-filters", "--stdin")
		if err != nil {
			return "", nil, err
		}
		fmt.Fprintf(&info, "%s %s\t%s\x00", gitMode(c.New), id, prefix+c.Path)
		res.Applied = append(res.Applied, c.Path)
	}
	if _, err := g.out(&info, "update-index", "-z", "--index-info"); err != nil {
		return "", nil, err
	}
	tree, err := g.out(nil, "write-tree")
	if err != nil {
		return "", nil, err
	}
	msg := fmt.Sprintf("hutch change set %s\n\n%s in %s (exit %d)\n", s.meta.ID,
		strings.Join(s.meta.Command, " "), ws, s.meta.ExitCode)
	commit, err := g.out(strings.NewReader(msg), "commit-tree", tree, "-p", head)
	if err != nil {
		return "", nil, err
	}
	// An empty old value: git refuses if the branch came to exist meanwhile.
	if _, err := g.out(nil, "update-ref", "-m", "hutch changes apply --branch", "refs/heads/"+name, commit, ""); err != nil {
		return "", nil, err
	}
	if all && len(res.Skipped) == 0 {
		s.meta.Branch, s.meta.Applied = name, time.Now()
		if err := s.save(); err != nil {
			return commit, res, err
		}
	}
	return commit, res, nil
}

// gitRun runs git in a directory with some environment of its own.
type gitRun struct {
	dir string
	env []string
}

// out runs git with args and stdin, and returns its output, trimmed.
func (g *gitRun) out(stdin io.Reader, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir, cmd.Stdin = g.dir, stdin
	cmd.Env = append(os.Environ(), g.env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if errors.Is(err, exec.ErrNotFound) {
		return "", errors.New("git is not installed (needed for --branch)")
	}
	if err != nil {
		return "", fmt.Errorf("git %s: %v: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}
