package agent

import (
	"bytes"
	"errors"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// readXattrs returns the extended attributes of p itself (a symlink is not
// followed) whose names start with prefix, keyed by the rest of their
// names; nil if it has none or its filesystem keeps none. At most
// maxXattrs of them, of at most maxXattrBytes in all (names and values),
// are returned: the sandbox may set more, which are left out.
func readXattrs(p, prefix string) map[string]wstr {
	names, err := listXattrs(func(b []byte) (int, error) { return unix.Llistxattr(p, b) })
	if err != nil {
		return nil
	}
	var out map[string]wstr
	total := 0
	var buf []byte
	for _, n := range names {
		key, ok := strings.CutPrefix(n, prefix)
		if !ok || key == "" || !utf8.ValidString(key) {
			continue
		}
		if buf == nil {
			buf = make([]byte, maxXattrBytes)
		}
		v, err := unix.Lgetxattr(p, n, buf)
		if err != nil {
			continue // removed meanwhile, or too large to keep
		}
		if total += len(key) + v; total > maxXattrBytes || len(out) >= maxXattrs {
			break
		}
		if out == nil {
			out = make(map[string]wstr)
		}
		out[key] = wstr(buf[:v])
	}
	return out
}

// listXattrs returns the names list (llistxattr or flistxattr) gives.
func listXattrs(list func([]byte) (int, error)) ([]string, error) {
	n, err := list(nil)
	if err != nil || n == 0 {
		return nil, err
	}
	buf := make([]byte, n+256) // room for names added meanwhile
	n, err = list(buf)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, b := range bytes.Split(buf[:n], []byte{0}) {
		if len(b) > 0 {
			names = append(names, string(b))
		}
	}
	return names, nil
}

// setXattrs replaces the extended attributes of the open file fd whose
// names start with prefix by set (keys without the prefix). A filesystem
// without extended attributes is no error when set is empty.
func setXattrs(fd int, p, prefix string, set map[string]wstr) error {
	names, err := listXattrs(func(b []byte) (int, error) { return unix.Flistxattr(fd, b) })
	if err != nil && !errors.Is(err, unix.ENOTSUP) {
		return pathError("list attributes of", p, err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			if _, keep := set[n[len(prefix):]]; keep {
				continue // replaced below
			}
			if err := unix.Fremovexattr(fd, n); err != nil && !errors.Is(err, unix.ENODATA) {
				return pathError("remove attribute of", p, err)
			}
		}
	}
	for k, v := range set {
		if err := unix.Fsetxattr(fd, prefix+k, []byte(v), 0); err != nil {
			if errors.Is(err, unix.ENOTSUP) {
				return errorf(CodeInvalid, "write %s: its filesystem keeps no extended attributes (%s*)", p, prefix)
			}
			return pathError("set attribute "+prefix+k+" of", p, err)
		}
	}
	return nil
}
