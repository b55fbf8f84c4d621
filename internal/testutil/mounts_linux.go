package testutil

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/mountinfo"
	"golang.org/x/sys/unix"
)

// RemoveMounted removes dir, a test's own directory, and what is mounted
// at or below it in this process's mount namespace (a daemon's volumes
// that outlive it by design, the network namespace runsc binds into its
// root), which it detaches first, deepest first: os.RemoveAll alone stops
// at a mount point, or empties the mounted filesystem. A mount point
// another mount namespace still uses may stay busy a moment after what
// used it ended: that is retried for up to half a minute. The error names
// what was left.
func RemoveMounted(dir string) error {
	dir = filepath.Clean(dir)
	deadline := time.Now().Add(30 * time.Second)
	for {
		mounts, err := mountinfo.Read("/proc/self/mountinfo")
		if err != nil {
			return err
		}
		var below []string
		for _, m := range mounts {
			if m.Point == dir || strings.HasPrefix(m.Point, dir+"/") {
				below = append(below, m.Point)
			}
		}
		// Deepest first; a point mounted over twice is detached twice.
		slices.SortFunc(below, func(a, b string) int { return len(b) - len(a) })
		for _, p := range below {
			_ = unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		}
		err = os.RemoveAll(dir)
		if err == nil || !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("remove %s (mounted there: %q): %w", dir, below, err)
			}
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}
