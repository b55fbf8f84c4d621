package image

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// User is who an image's command runs as, resolved against the image's
// own /etc/passwd and /etc/group.
type User struct {
	// Name is the user's name in the image's passwd ("" for a numeric
	// user it does not list).
	Name string
	UID  int
	GID  int
	// Groups are the supplementary groups: those of the image's group
	// file that list the user by name (none when the image's user names
	// its group).
	Groups []int
	// Home is the user's home directory from passwd ("/" when it has no
	// entry).
	Home string
}

// maxIDFile bounds the passwd and group files read from an image.
const maxIDFile = 1 << 20

// User resolves img's configured user (Config.User) as Docker does: no
// user is root (uid 0); "name" and "uid" are looked up in the image's
// /etc/passwd (a uid it does not list is fine: group 0, home "/"; a name
// it does not list is an error that names the image); "user:group" takes
// the group by name from the image's /etc/group, or as a number.
func (s *Store) User(img *Image) (User, error) {
	dirs := make([]string, len(img.Layers))
	for i, l := range img.Layers {
		d, err := s.LayerDir(l)
		if err != nil {
			return User{}, err
		}
		dirs[i] = d
	}
	u, err := ResolveUser(img.Config.User, func(name string) ([]byte, error) { return ReadMerged(dirs, name) })
	if err != nil {
		return User{}, fmt.Errorf("image %s: %w", img.name(), err)
	}
	return u, nil
}

// name is how errors name the image: its first name, else its digest.
func (img *Image) name() string {
	if len(img.Refs) > 0 {
		return img.Refs[0]
	}
	return img.Digest
}

// ResolveUser resolves spec (Config.User) with the image's files, which
// read returns by name ("etc/passwd", "etc/group"; os.ErrNotExist when
// the image lacks one).
func ResolveUser(spec string, read func(name string) ([]byte, error)) (User, error) {
	userPart, groupPart, hasGroup := strings.Cut(spec, ":")
	if userPart == "" {
		if hasGroup {
			return User{}, fmt.Errorf("user %q: no user before the colon", spec)
		}
		userPart = "0"
	}
	passwd, err := readIDFile(read, "etc/passwd")
	if err != nil {
		return User{}, err
	}
	uid, numeric := parseID(userPart)
	if !numeric && uid < 0 {
		return User{}, fmt.Errorf("user %q: not a name or an id", spec)
	}
	u := User{UID: uid, Home: "/"}
	found := false
	for _, f := range passwd {
		if len(f) < 7 {
			continue
		}
		id, ok := parseID(f[2])
		if !ok || (numeric && id != uid) || (!numeric && f[0] != userPart) {
			continue
		}
		gid, ok := parseID(f[3])
		if !ok {
			continue
		}
		u = User{Name: f[0], UID: id, GID: gid, Home: f[5]}
		found = true
		break
	}
	if !found && !numeric {
		return User{}, fmt.Errorf("user %q: no such user in the image's /etc/passwd", userPart)
	}
	if u.Home == "" {
		u.Home = "/"
	}
	groups, err := readIDFile(read, "etc/group")
	if err != nil {
		return User{}, err
	}
	if hasGroup {
		gid, numericGroup := parseID(groupPart)
		if !numericGroup {
			gid = -1
			for _, f := range groups {
				if len(f) >= 3 && f[0] == groupPart {
					if id, ok := parseID(f[2]); ok {
						gid = id
						break
					}
				}
			}
			if gid < 0 {
				return User{}, fmt.Errorf("user %q: no such group %q in the image's /etc/group", spec, groupPart)
			}
		}
		u.GID = gid
		return u, nil
	}
	if u.Name == "" {
		return u, nil
	}
	for _, f := range groups {
		if len(f) < 4 {
			continue
		}
		gid, ok := parseID(f[2])
		if !ok || gid == u.GID || slices.Contains(u.Groups, gid) {
			continue
		}
		if slices.Contains(strings.Split(f[3], ","), u.Name) {
			u.Groups = append(u.Groups, gid)
		}
	}
	return u, nil
}

// parseID parses a numeric id (0 to 2^31-1); numeric reports whether s is
// one, and a non-numeric s that is not a valid name gives -1.
func parseID(s string) (id int, numeric bool) {
	n, err := strconv.ParseUint(s, 10, 31)
	if err == nil {
		return int(n), true
	}
	if s == "" || strings.ContainsAny(s, ":/\n\x00") || s[0] >= '0' && s[0] <= '9' {
		return -1, false
	}
	return 0, false
}

// readIDFile reads a passwd-like file as its lines' colon-separated
// fields (comments and blank lines left out); a missing file is empty.
func readIDFile(read func(string) ([]byte, error), name string) ([][]string, error) {
	b, err := read(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the image's /%s: %w", name, err)
	}
	var out [][]string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), maxIDFile)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		out = append(out, strings.Split(line, ":"))
	}
	return out, sc.Err()
}

// ReadMerged reads the regular file name (relative, slash-separated) as
// the layers dirs (bottom first), stacked by overlayfs, show it: from the
// top layer down, where a whiteout (a 0/0 character device, as package
// layer stores ".wh." entries) ends the search, and so does an opaque
// directory on the way (trusted.overlay.opaque or user.overlay.opaque)
// for the layers below it. No symbolic link is followed, in the layers or
// on the way: a name that is one is refused. os.ErrNotExist when no
// layer shows it; at most 1 MiB is read.
func ReadMerged(dirs []string, name string) ([]byte, error) {
	parts := strings.Split(name, "/")
	for i := len(dirs) - 1; i >= 0; i-- {
		b, stop, err := readInLayer(dirs[i], parts)
		if err == nil || !errors.Is(err, os.ErrNotExist) || stop {
			return b, err
		}
	}
	return nil, os.ErrNotExist
}

// readInLayer looks for parts in the layer dir: the file's bytes, or
// os.ErrNotExist with stop set when the layers below are hidden from it
// (a whiteout, an opaque directory or a non-directory on the way).
func readInLayer(dir string, parts []string) (b []byte, stop bool, err error) {
	cur := dir
	for i, p := range parts {
		cur = filepath.Join(cur, p)
		var st unix.Stat_t
		if err := unix.Lstat(cur, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil, stop, os.ErrNotExist
			}
			return nil, true, err
		}
		last := i == len(parts)-1
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFCHR:
			if st.Rdev == 0 { // a whiteout
				return nil, true, os.ErrNotExist
			}
			return nil, true, fmt.Errorf("/%s is not a regular file", strings.Join(parts[:i+1], "/"))
		case unix.S_IFLNK:
			return nil, true, fmt.Errorf("/%s is a symbolic link, which hutch does not follow in an image's layers", strings.Join(parts[:i+1], "/"))
		case unix.S_IFDIR:
			if last {
				return nil, true, os.ErrNotExist
			}
			if opaque(cur) {
				stop = true
			}
		case unix.S_IFREG:
			if !last {
				return nil, true, os.ErrNotExist
			}
			f, err := os.OpenFile(cur, os.O_RDONLY|unix.O_NOFOLLOW, 0)
			if err != nil {
				return nil, true, err
			}
			defer f.Close()
			b, err := io.ReadAll(io.LimitReader(f, maxIDFile+1))
			if err == nil && len(b) > maxIDFile {
				err = fmt.Errorf("/%s is larger than %d bytes", strings.Join(parts, "/"), maxIDFile)
			}
			return b, true, err
		default:
			return nil, true, os.ErrNotExist
		}
	}
	return nil, stop, os.ErrNotExist
}

// opaque reports whether the directory path is marked opaque for
// overlayfs.
func opaque(path string) bool {
	buf := make([]byte, 4)
	for _, attr := range []string{"trusted.overlay.opaque", "user.overlay.opaque"} {
		if n, err := unix.Lgetxattr(path, attr, buf); err == nil && n == 1 && buf[0] == 'y' {
			return true
		}
	}
	return false
}
