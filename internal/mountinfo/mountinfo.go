// Package mountinfo parses the kernel's mountinfo files
// (/proc/PID/mountinfo, proc(5)): one line per mount of a process's mount
// namespace, with where it is mounted, what of its filesystem it shows,
// its kind and its options. Paths are unescaped. Parse reads no file, so
// it is tested on samples; Read reads one.
package mountinfo

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Mount is one line of a mountinfo file.
type Mount struct {
	// Root is the directory of its filesystem the mount shows; Point is
	// where it is mounted, relative to the reading process's root.
	Root, Point string
	// Dev is the filesystem's device number ("MAJOR:MINOR"): mounts with
	// the same one show the same filesystem (a bind mount shows a
	// directory of another's at its own point).
	Dev string
	// Options are the mount's own (ro, nosuid, nodev, ...).
	Options []string
	// FSType and Source are the filesystem's kind (ext4, proc, tmpfs, ...)
	// and source; SuperOptions its own options.
	FSType, Source string
	SuperOptions   []string
}

// ReadOnly reports whether the mount is read-only.
func (m Mount) ReadOnly() bool { return slices.Contains(m.Options, "ro") }

// Parse returns the mounts of a mountinfo text, in order; a line that is
// not one is skipped.
func Parse(s string) []Mount {
	var ms []Mount
	for line := range strings.Lines(s) {
		// ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER-OPTIONS
		f := strings.Fields(line)
		if len(f) < 10 {
			continue
		}
		sep := slices.Index(f[6:], "-") + 6
		if sep < 6 || len(f) < sep+4 {
			continue
		}
		ms = append(ms, Mount{
			Dev:          f[2],
			Root:         Unescape(f[3]),
			Point:        Unescape(f[4]),
			Options:      strings.Split(f[5], ","),
			FSType:       f[sep+1],
			Source:       Unescape(f[sep+2]),
			SuperOptions: strings.Split(f[sep+3], ","),
		})
	}
	return ms
}

// Read parses the mountinfo file at path.
func Read(path string) ([]Mount, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("mounts: %w", err)
	}
	return Parse(string(b)), nil
}

// Unescape decodes mountinfo's octal escapes (\040 for a space, \011,
// \012, \134).
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
