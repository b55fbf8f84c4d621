package sandbox

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/gitmeta"
)

// The placeholders that hold missing protected paths are empty entries in
// the workspace while the sandbox runs, and git would list them as
// untracked files (and `git add -A` commit them). So in the sandbox's view
// the repository's info/exclude — the file git reads for untracked files
// to pass over, local to the repository — is a copy of the host's with the
// placeholders added, bound read-only over it. The host's file does not
// change; git on the host, during the run, still sees them.

// excludeBinds returns the bindings of info/exclude copies for the
// repositories the writable roots lie in, and a function that removes
// the copies.
func excludeBinds(placeholders map[string]placeholderKind) ([]fileBind, func()) {
	type repo struct {
		exclude string   // the info/exclude to cover
		names   []string // patterns to add
	}
	repos := map[string]*repo{} // by worktree
	type found struct{ wt, gitDir string }
	seen := map[string]found{} // by the placeholder's directory
	for ph := range placeholders {
		f, ok := seen[filepath.Dir(ph)]
		if !ok {
			f.wt, f.gitDir = repoOf(filepath.Dir(ph))
			seen[filepath.Dir(ph)] = f
		}
		wt, gitDir := f.wt, f.gitDir
		if wt == "" || under(ph, []string{gitDir}) {
			continue
		}
		r := repos[wt]
		if r == nil {
			ex := filepath.Join(commonDir(gitDir), "info", "exclude")
			r = &repo{exclude: ex}
			repos[wt] = r
		}
		rel, err := filepath.Rel(wt, ph)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		r.names = append(r.names, "/"+escapePattern(rel))
	}
	var binds []fileBind
	var temps []string
	for _, wt := range slices.Sorted(maps.Keys(repos)) {
		r := repos[wt]
		orig, err := readNoFollow(r.exclude, 1<<20)
		if err != nil {
			continue // none to cover (git reads none either): the placeholders show
		}
		slices.Sort(r.names)
		var b bytes.Buffer
		b.Write(orig)
		if len(orig) > 0 && orig[len(orig)-1] != '\n' {
			b.WriteByte('\n')
		}
		b.WriteString("# hutch: empty stand-ins for protected paths, only while the sandbox runs\n")
		for _, n := range r.names {
			b.WriteString(n + "\n")
		}
		f, err := os.CreateTemp("", "hutch-exclude-")
		if err != nil {
			continue
		}
		_, werr := f.Write(b.Bytes())
		cerr := f.Close()
		if werr != nil || cerr != nil || os.Chmod(f.Name(), 0o444) != nil {
			os.Remove(f.Name())
			continue
		}
		temps = append(temps, f.Name())
		binds = append(binds, fileBind{Path: f.Name(), Target: r.exclude, HostTarget: true})
	}
	return binds, func() {
		for _, t := range temps {
			os.Remove(t)
		}
	}
}

// repoOf finds the repository whose worktree holds dir: its worktree and
// git directory, looking up from dir as git does (a .git directory, or a
// gitlink naming one); "" when there is none. Only .git entries reached
// without a symbolic link are taken.
func repoOf(dir string) (worktree, gitDir string) {
	for d := dir; ; d = filepath.Dir(d) {
		g := filepath.Join(d, gitmeta.GitDir)
		if isDirNoFollow(g) {
			return d, g
		}
		if data, err := readNoFollow(g, 64<<10); err == nil {
			if target, err := gitmeta.ParseGitFile(data); err == nil {
				return d, resolveFrom(d, target)
			}
		}
		if d == "/" {
			return "", ""
		}
	}
}

// commonDir is the directory holding gitDir's shared files (info among
// them): the one its commondir names, or gitDir itself.
func commonDir(gitDir string) string {
	data, err := readNoFollow(filepath.Join(gitDir, "commondir"), 4096)
	if err != nil {
		return gitDir
	}
	c := strings.TrimSpace(string(data))
	if c == "" || c == "." {
		return gitDir
	}
	return resolveFrom(gitDir, c)
}

// escapePattern quotes the characters special in a gitignore pattern.
func escapePattern(p string) string {
	var b strings.Builder
	for i, r := range p {
		switch {
		case strings.ContainsRune(`*?[]\`, r), i == 0 && (r == '#' || r == '!'):
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	s := b.String()
	if strings.HasSuffix(s, " ") {
		s = strings.TrimSuffix(s, " ") + "\\ "
	}
	return s
}
