//go:build !linux

package agent

// readXattrs returns nil: extended attributes are read on Linux only.
func readXattrs(p, prefix string) map[string]wstr { return nil }

// setXattrs fails unless set is empty: extended attributes are set on
// Linux only.
func setXattrs(fd int, p, prefix string, set map[string]wstr) error {
	if len(set) > 0 {
		return errorf(CodeInvalid, "write %s: extended attributes are not supported on this platform", p)
	}
	return nil
}
