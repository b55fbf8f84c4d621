package sandbox

import (
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/gitmeta"
)

// Git at every depth of the writable areas.
//
// Git takes configuration and commands from every git directory it finds,
// not only the workspace's top one: a nested repository, a submodule's
// directory under .git/modules, a linked worktree's under .git/worktrees,
// the file a commondir or a gitlink points to, the hooks directory of
// core.hooksPath, included configuration files. Before the sandbox starts,
// hutch walks every writable area (without following symbolic links),
// finds every .git entry, and protects in each git directory the names of
// gitmeta.ControlNames (placeholders for the missing ones: an empty config
// file, an empty hooks or info directory, a commondir naming the directory
// itself), pins the .git entries, and protects what the configuration of
// each repository, and the user's own git configuration, name in a
// writable area. It keeps the identity of every directory it walked.
//
// A repository the sandbox creates while it runs cannot be protected in
// advance. When the sandbox has ended, hutch looks again — only into the
// directories whose identity changed, which are the only ones that can
// hold new entries — and inspects every .git entry, and every git directory
// under a known repository's modules and worktrees, that was not there
// before: a repository whose configuration sets anything beyond what git
// init and git clone write, that has hooks, whose commondir points
// elsewhere, or that is a symbolic link, is set aside (renamed with
// policy.SetAsideSuffix), so that the user's next git command there runs
// nothing the sandbox chose.

// maxScanDirs bounds the directories one scan walks (S7: the tree may be a
// sandbox's making); maxScanDepth bounds their depth.
const (
	maxScanDirs  = 50_000
	maxScanDepth = 256
	maxGitDirs   = 4096 // git directories protected or inspected per sandbox
)

// fileID is what hutch remembers of a file to tell whether it changed: a
// new entry in a directory changes its ctime, which nothing inside the
// sandbox can set back.
type fileID struct {
	dev, ino uint64
	ctime    unix.Timespec
	mode     uint32
}

func idOf(st *unix.Stat_t) fileID {
	return fileID{dev: st.Dev, ino: st.Ino, ctime: st.Ctim, mode: st.Mode & unix.S_IFMT}
}

// gitScan is what hutch found of git in the writable areas before the
// sandbox started.
type gitScan struct {
	roots     []string
	home      string
	dirs      map[string]fileID          // every directory walked
	entries   map[string]fileID          // every .git entry found, by path
	gitDirs   map[string]bool            // every git directory protected
	watch     map[string]fileID          // directories whose new entries may be new git directories
	worktrees map[string]string          // git directory → the worktree it belongs to
	bare      []string                   // git directories found without a .git entry (bare repositories)
	skip      map[string]placeholderKind // paths the check after the sandbox ends passes over
	prot      []protected
	truncated bool
}

// gitLooks gathers what a directory holds that makes it a git directory:
// git takes a directory with a HEAD file and objects and refs directories
// for one (and the user's next git command inside it reads its config).
type gitLooks struct{ head, objects, refs bool }

func (l *gitLooks) see(name string, typ byte) {
	switch {
	case name == "HEAD" && typ == unix.DT_REG:
		l.head = true
	case name == "objects" && typ == unix.DT_DIR:
		l.objects = true
	case name == "refs" && typ == unix.DT_DIR:
		l.refs = true
	}
}

func (l gitLooks) gitDir() bool { return l.head && l.objects && l.refs }

// dtype is the d_type of a file of mode m.
func dtype(m uint32) byte {
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		return unix.DT_DIR
	case unix.S_IFREG:
		return unix.DT_REG
	case unix.S_IFLNK:
		return unix.DT_LNK
	}
	return unix.DT_UNKNOWN
}

// scanGit walks roots and lists the protections of every git directory in
// them. home is the invoking user's home, whose git configuration may name
// hooks or programs inside a writable area.
func scanGit(roots []string, home string) *gitScan {
	g := &gitScan{
		roots: roots, home: home,
		dirs: map[string]fileID{}, entries: map[string]fileID{}, gitDirs: map[string]bool{},
		watch: map[string]fileID{}, worktrees: map[string]string{},
	}
	buf := make([]byte, 32<<10)
	for _, r := range roots {
		fd, err := unix.Open(r, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		g.walk(fd, r, 0, buf, nil)
		unix.Close(fd)
	}
	var global []gitmeta.Var
	for _, f := range globalGitConfigs(home) {
		global = append(global, g.configVars(f, 0)...)
	}
	for _, e := range slices.Sorted(maps.Keys(g.entries)) {
		g.protectEntry(e, global)
	}
	for _, d := range g.bare {
		g.protectGitDir(d, "", global, 0)
	}
	return g
}

// walk records the directory open at fd (path p) and everything below it.
// found, when not nil, collects the .git entries (the check after the
// sandbox ends); otherwise they go to g.entries.
func (g *gitScan) walk(fd int, p string, depth int, buf []byte, found *[]string) {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return
	}
	if len(g.dirs) >= maxScanDirs || depth > maxScanDepth {
		g.truncated = true
		return
	}
	g.dirs[p] = idOf(&st)
	var subdirs []string
	var looks gitLooks
	readDir(fd, buf, func(name string, typ byte) {
		if name == gitmeta.GitDir {
			var est unix.Stat_t
			if unix.Fstatat(fd, name, &est, unix.AT_SYMLINK_NOFOLLOW) == nil {
				path := filepath.Join(p, name)
				if found != nil {
					*found = append(*found, path)
				} else {
					g.entries[path] = idOf(&est)
				}
			}
			return // git directories are read by protectGitDir, not walked
		}
		if typ == unix.DT_UNKNOWN {
			var est unix.Stat_t
			if unix.Fstatat(fd, name, &est, unix.AT_SYMLINK_NOFOLLOW) != nil {
				return
			}
			typ = dtype(est.Mode)
		}
		looks.see(name, typ)
		if typ == unix.DT_DIR {
			subdirs = append(subdirs, name)
		}
	})
	if looks.gitDir() {
		// A git directory of its own (a bare repository): git takes its
		// configuration from it when run inside.
		if found != nil {
			*found = append(*found, p)
		} else {
			g.bare = append(g.bare, p)
		}
		return
	}
	for _, name := range subdirs {
		child := filepath.Join(p, name)
		if _, seen := g.dirs[child]; seen && found != nil {
			continue // known and unchanged, or checked on its own
		}
		cfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		g.walk(cfd, child, depth+1, buf, found)
		unix.Close(cfd)
	}
}

// readDir calls f for every entry of the directory open at fd but "." and
// "..", with its d_type.
func readDir(fd int, buf []byte, f func(name string, typ byte)) {
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil || n <= 0 {
			return
		}
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(b[16]) | int(b[17])<<8
			if reclen < 19 || reclen > len(b) {
				return
			}
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if s := string(name); s != "." && s != ".." {
				f(s, b[18])
			}
			b = b[reclen:]
		}
	}
}

// rootOf returns the writable root p lies in, or "".
func (g *gitScan) rootOf(p string) string {
	for _, r := range g.roots {
		if under(p, []string{r}) {
			return r
		}
	}
	return ""
}

// protectEntry protects the .git entry e, the git directory it is or
// points to, and what their configuration names.
func (g *gitScan) protectEntry(e string, global []gitmeta.Var) {
	root := g.rootOf(e)
	worktree := filepath.Dir(e)
	id := g.entries[e]
	var gitDir string
	switch id.mode {
	case unix.S_IFDIR:
		g.prot = append(g.prot, protected{Path: e, Root: root, Pin: true})
		gitDir = e
	case unix.S_IFREG:
		g.prot = append(g.prot, protected{Path: e, Root: root})
		if data, err := readNoFollow(e, 64<<10); err == nil {
			if target, err := gitmeta.ParseGitFile(data); err == nil {
				gitDir = resolveFrom(worktree, target)
			}
		}
	case unix.S_IFLNK:
		// A symbolic link cannot be bound over; the check after the
		// sandbox ends sees it replaced. Its target is protected.
		if target, err := os.Readlink(e); err == nil {
			gitDir = resolveFrom(worktree, target)
		}
	}
	if gitDir == "" || g.rootOf(gitDir) == "" || !isDirNoFollow(gitDir) {
		return // outside the writable areas: read-only to the sandbox anyway
	}
	g.protectGitDir(gitDir, worktree, global, 0)
}

// protectGitDir protects the control names of the git directory d, whose
// worktree is worktree ("" when unknown), its submodules' and worktrees'
// git directories, and what its configuration names.
func (g *gitScan) protectGitDir(d, worktree string, global []gitmeta.Var, depth int) {
	if g.gitDirs[d] || len(g.gitDirs) >= maxGitDirs || depth > 8 {
		return
	}
	g.gitDirs[d] = true
	if worktree != "" {
		g.worktrees[d] = worktree
	}
	root := g.rootOf(d)
	var st unix.Stat_t
	if unix.Lstat(d, &st) == nil {
		g.watch[d] = idOf(&st)
	}
	for _, n := range gitmeta.ControlNames {
		kind := placeholderFile
		switch {
		case slices.Contains(gitmeta.DirControlNames, n):
			kind = placeholderDir
		case n == "commondir":
			kind = placeholderSelf
		}
		g.prot = append(g.prot, protected{Path: filepath.Join(d, n), Root: root, Kind: kind})
	}
	var vars []gitmeta.Var
	for _, n := range []string{"config", "config.worktree"} {
		vars = append(vars, g.configVars(filepath.Join(d, n), 0)...)
	}
	g.protectNamed(append(slices.Clone(global), vars...), worktree, d)

	// Submodules: every git directory under modules, at any depth (a
	// submodule's name may hold slashes).
	modules := filepath.Join(d, "modules")
	queue := []string{modules}
	for len(queue) > 0 && len(g.gitDirs) < maxGitDirs {
		dir := queue[0]
		queue = queue[1:]
		if unix.Lstat(dir, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		g.watch[dir] = idOf(&st)
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if !e.IsDir() {
				continue
			}
			m := filepath.Join(dir, e.Name())
			if isGitDir(m) {
				g.protectGitDir(m, "", global, depth+1)
			} else {
				queue = append(queue, m)
			}
		}
	}

	// Linked worktrees: their own config, the commondir that ties them to
	// this directory and the gitdir file naming their checkout.
	wts := filepath.Join(d, "worktrees")
	if unix.Lstat(wts, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		g.watch[wts] = idOf(&st)
		ents, _ := os.ReadDir(wts)
		for _, e := range ents {
			if !e.IsDir() {
				continue
			}
			w := filepath.Join(wts, e.Name())
			g.gitDirs[w] = true
			for _, n := range []string{"config.worktree", "gitdir"} {
				g.prot = append(g.prot, protected{Path: filepath.Join(w, n), Root: root})
			}
			g.prot = append(g.prot, protected{Path: filepath.Join(w, "commondir"), Root: root, Kind: placeholderSelf})
			g.protectNamed(g.configVars(filepath.Join(w, "config.worktree"), 0), "", w)
		}
	}
}

// protectNamed protects the hooks directories, included files and
// programs that vars (of the git directory d, with worktree worktree)
// name inside a writable area, missing or not.
func (g *gitScan) protectNamed(vars []gitmeta.Var, worktree, d string) {
	for _, v := range vars {
		for _, ref := range gitmeta.Paths(v) {
			var p string
			switch {
			case strings.HasPrefix(ref.Path, "~/") && g.home != "":
				p = filepath.Join(g.home, ref.Path[2:])
			case filepath.IsAbs(ref.Path):
				p = filepath.Clean(ref.Path)
			case ref.Kind == gitmeta.Include:
				p = filepath.Join(d, ref.Path) // relative to the configuration file
			case worktree != "":
				p = filepath.Join(worktree, ref.Path)
			default:
				continue
			}
			root := g.rootOf(p)
			if root == "" || p == root {
				continue
			}
			kind := placeholderFile
			if ref.Kind == gitmeta.Dir {
				kind = placeholderDir
			}
			g.prot = append(g.prot, protected{Path: p, Root: root, Kind: kind})
		}
	}
}

// configVars parses the git configuration file f, and the files it
// includes (to git's own depth limit); a missing or malformed file has
// none.
func (g *gitScan) configVars(f string, depth int) []gitmeta.Var {
	data, err := readNoFollow(f, gitmeta.MaxConfigSize)
	if err != nil {
		return nil
	}
	vars, err := gitmeta.Parse(data)
	if err != nil {
		return nil
	}
	if depth < 10 {
		for _, v := range vars {
			for _, ref := range gitmeta.Paths(v) {
				if ref.Kind != gitmeta.Include {
					continue
				}
				inc := ref.Path
				switch {
				case strings.HasPrefix(inc, "~/") && g.home != "":
					inc = filepath.Join(g.home, inc[2:])
				case !filepath.IsAbs(inc):
					inc = filepath.Join(filepath.Dir(f), inc)
				}
				vars = append(vars, g.configVars(inc, depth+1)...)
			}
		}
	}
	return vars
}

// globalGitConfigs are the configuration files every repository of the
// user reads: the system's, and the user's in both of git's places.
func globalGitConfigs(home string) []string {
	out := []string{"/etc/gitconfig"}
	if home != "" {
		out = append(out, filepath.Join(home, ".gitconfig"))
		xdg := os.Getenv("XDG_CONFIG_HOME")
		if xdg == "" || !filepath.IsAbs(xdg) {
			xdg = filepath.Join(home, ".config")
		}
		out = append(out, filepath.Join(xdg, "git", "config"))
	}
	return out
}

// resolveFrom resolves target, as a gitlink or symbolic link in dir names
// it, lexically.
func resolveFrom(dir, target string) string {
	if filepath.IsAbs(target) {
		return filepath.Clean(target)
	}
	return filepath.Join(dir, target)
}

// readNoFollow reads the regular file at path, following no symbolic link
// on the way, up to max bytes (more is an error).
func readNoFollow(path string, max int) ([]byte, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		Flags: unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK, Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, errors.New("not a regular file")
	}
	if st.Size > int64(max) {
		return nil, errors.New("too large")
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if len(data) > max {
		return nil, errors.New("too large")
	}
	return data, err
}

// isDirNoFollow reports whether path is a directory reached without any
// symbolic link.
func isDirNoFollow(path string) bool {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}
