package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/policy"
)

// MaxVolumes is how many volumes a sandbox may have.
const MaxVolumes = 16

// volumeForbidden are the directories of the view no volume may lie at or
// under: the sandbox's own kernel filesystems and devices, which hutch
// mounts there.
var volumeForbidden = []string{"/proc", "/sys", "/dev"}

// CheckVolumes checks volumes for a sandbox whose workspace is at
// workspace in its view ("" for none): at most MaxVolumes; each Dir
// absolute, clean and an existing directory (followed if a symbolic link:
// the host's path is the daemon's own); each At absolute, clean, not a
// system directory (policy.SystemDir: "/", /etc, /usr …), not at or under
// /proc, /sys or /dev, neither the workspace nor inside it nor holding it
// (the workspace is a directory of the sandbox's root, which a volume
// would hide or be hidden by); no two at one path, and none inside
// another. The error names the volume by its index.
func CheckVolumes(volumes []Volume, workspace string) error {
	if len(volumes) > MaxVolumes {
		return fmt.Errorf("%d volumes, at most %d allowed", len(volumes), MaxVolumes)
	}
	for i, v := range volumes {
		if err := checkVolume(v, workspace); err != nil {
			return fmt.Errorf("volume %d: %w", i, err)
		}
		for j, o := range volumes[:i] {
			switch {
			case o.At == v.At:
				return fmt.Errorf("volume %d: at %s: volume %d is there already", i, v.At, j)
			case pathUnder(v.At, o.At):
				return fmt.Errorf("volume %d: at %s: inside volume %d at %s", i, v.At, j, o.At)
			case pathUnder(o.At, v.At):
				return fmt.Errorf("volume %d: at %s: holds volume %d at %s", i, v.At, j, o.At)
			}
		}
	}
	return nil
}

// checkVolume is CheckVolumes for one volume.
func checkVolume(v Volume, workspace string) error {
	switch {
	case v.Dir == "":
		return errors.New("no host directory")
	case !filepath.IsAbs(v.Dir) || filepath.Clean(v.Dir) != v.Dir:
		return fmt.Errorf("host directory %q: not an absolute, clean path", v.Dir)
	}
	if fi, err := os.Stat(v.Dir); err != nil {
		return fmt.Errorf("host directory %s: %w", v.Dir, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("host directory %s: not a directory", v.Dir)
	}
	switch {
	case v.At == "":
		return errors.New("no path to show it at")
	case !filepath.IsAbs(v.At) || filepath.Clean(v.At) != v.At:
		return fmt.Errorf("at %q: not an absolute, clean path", v.At)
	case policy.SystemDir(v.At):
		return fmt.Errorf("at %s: a system directory", v.At)
	case slices.ContainsFunc(volumeForbidden, func(d string) bool { return pathUnder(v.At, d) }):
		return fmt.Errorf("at %s: under /proc, /sys or /dev, which are the sandbox's own", v.At)
	case workspace != "" && v.At == workspace:
		return fmt.Errorf("at %s: the sandbox's workspace", v.At)
	case workspace != "" && pathUnder(v.At, workspace):
		return fmt.Errorf("at %s: inside the sandbox's workspace %s", v.At, workspace)
	case workspace != "" && pathUnder(workspace, v.At):
		return fmt.Errorf("at %s: holds the sandbox's workspace %s", v.At, workspace)
	}
	return nil
}

// pathUnder reports whether the clean absolute path p is dir or lies in it.
func pathUnder(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}
