package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/policy"
)

// The home directory (policy filesystem.home).
//
// A home that is itself a writable area is the host's, writable, with the
// home-only protected names held; one below the sandbox's own /tmp is not
// there at all. Otherwise:
//
//   - "ro" (the default): the real home, read-only, with an overlay whose
//     upper layer is a tmpfs of tmp_size bytes: toolchains, caches and
//     configuration read as they are (~/go, ~/.cargo, ~/.rustup, ~/.npm,
//     ~/.gitconfig), what the sandbox writes there (a build cache, npm's
//     logs) works and is gone when it ends. An ordinary user's sandbox
//     builds the overlay itself, over the home it reads. A sandbox started
//     by root cannot enter root's home (0700) as its unprivileged identity:
//     hutch builds the overlay, its lower layer idmapped so that the home's
//     files are the sandbox's own (as the workspace is), when the home
//     belongs to the workspace's owner; otherwise the sandbox gets an empty
//     home (as "tmp"), and hutch says so.
//   - "tmp": an empty home of its own on a tmpfs of tmp_size bytes.
//   - "persist": a home of its own, kept between runs: a directory per
//     workspace under $XDG_STATE_HOME/hutch/homes (~/.local/state), bound
//     read-write.
//
// The default deny-read paths are masked in every mode.

// homesDir is where persisted homes are kept, below the state directory.
const homesDir = "hutch/homes"

// setHome decides how the sandbox sees the invoking user's home and sets
// cfg for it; build says hutch must build the home's overlay (homeLayer)
// and send it. note is for the user when the mode asked for cannot be had.
func setHome(cfg *initConfig, s policy.Spec, environ, roots []string, asRoot bool, wsUID, wsGID int) (build bool, note string, err error) {
	home := envHome(environ)
	var st unix.Stat_t
	if home == "" || home == "/" || !filepath.IsAbs(home) || under(home, roots) || under(home, ownFilesystems) ||
		unix.Stat(home, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return false, "", nil
	}
	home = filepath.Clean(home)
	mode := s.Filesystem.Home
	if mode == "" {
		mode = policy.DefaultHome
	}
	switch mode {
	case "tmp":
		cfg.PrivateHome = home
		return false, "", nil
	case "persist":
		dir, err := persistedHome(home, s.Filesystem.Workspace, asRoot, wsUID, wsGID)
		if err != nil {
			return false, "", fmt.Errorf("--home persist: %w", err)
		}
		cfg.Home, cfg.HomePersist = home, bindSrc{Path: dir, FD: -1}
		return false, "", nil
	}
	// "ro": an overlay over the real home.
	if !asRoot {
		if !overlayFDs() {
			return false, "this kernel cannot layer the home directory (Linux 6.8 or later can): it is read-only in the sandbox, and writes there fail", nil
		}
		cfg.Home, cfg.HomeOverlay = home, true
		return false, "", nil
	}
	if int(st.Uid) != wsUID {
		// The idmap makes the workspace owner's files the sandbox's; the
		// home of another user would stay closed to it.
		if privateHome(environ, roots) != "" {
			cfg.PrivateHome = home
			return false, fmt.Sprintf("%s is not the workspace owner's: the sandbox gets an empty home of its own (--home tmp)", home), nil
		}
	}
	cfg.Home = home
	return true, "", nil
}

// persistedHome returns (making it) the directory kept as the home of the
// sandboxes of workspace: below the state directory of the user who owns
// home, named after the workspace.
func persistedHome(home, workspace string, asRoot bool, uid, gid int) (string, error) {
	state := os.Getenv("XDG_STATE_HOME")
	if state == "" || !filepath.IsAbs(state) {
		state = filepath.Join(home, ".local", "state")
	}
	sum := sha256.Sum256([]byte(workspace))
	dir := filepath.Join(state, homesDir, filepath.Base(workspace)+"-"+hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if asRoot {
		// The sandbox writes it as the workspace's owner.
		if err := os.Chown(dir, uid, gid); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// homeLayer builds (as root) the overlay of a root-started sandbox's home:
// the home below, idmapped with the sandbox's user namespace and
// read-only, and a tmpfs of size bytes above.
func homeLayer(pid int, home string, size int64) (int, error) {
	userns, err := sandboxUserns(pid)
	if err != nil {
		return -1, fmt.Errorf("home: %w", err)
	}
	defer unix.Close(userns)
	lower, err := idmappedLower(home, userns)
	if err != nil {
		return -1, fmt.Errorf("home: %w", err)
	}
	defer unix.Close(lower)
	opts := [][2]string{{"mode", "0755"}}
	if size > 0 {
		opts = append(opts, [2]string{"size", strconv.FormatInt(size, 10)})
	}
	ovl, err := tmpfsOverlay([]int{lower}, opts, 0o700, nil)
	if err != nil {
		return -1, fmt.Errorf("home: %w", err)
	}
	return ovl, nil
}

// overlayFDs reports whether overlayfs takes its layers as descriptors
// ("lowerdir+" by descriptor: Linux 6.8).
func overlayFDs() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	rel := unix.ByteSliceToString(u.Release[:])
	major, rest, _ := strings.Cut(rel, ".")
	minor, _, _ := strings.Cut(rest, ".")
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(strings.TrimRightFunc(minor, func(r rune) bool { return r < '0' || r > '9' }))
	if errors.Join(err1, err2) != nil {
		return false
	}
	return ma > 6 || ma == 6 && mi >= 8
}
