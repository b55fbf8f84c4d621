package daemon

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// closedCache is where a daemon run as root shares its scan of the host's
// root (closedPaths) with the other daemons of the machine — one
// restarted, one beside it on another state directory: a scan reads every
// file's mode, seconds of CPU on a host with a large /usr. A daemon takes
// another's scan only at its start, and only one younger than closedEvery
// from this boot, in a file and a directory only root may write; its own
// rescans are its own, and replace the file.
var closedCache = "/run/hutch/closed-paths.json"

// maxClosedCache bounds what is read of closedCache.
const maxClosedCache = 64 << 20

// closedScan is closedCache's content.
type closedScan struct {
	Boot  string    `json:"boot"`
	At    time.Time `json:"at"`
	Skip  []string  `json:"skip"`
	Dirs  []string  `json:"dirs"`
	Files []string  `json:"files"`
}

// hostBootID is the host's boot id, "" if unknown.
func hostBootID() string {
	b, _ := os.ReadFile(sandbox.BootIDPath)
	return strings.TrimSpace(string(b))
}

// rootOnly reports whether fi is owned by root and writable by no one
// else.
func rootOnly(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Uid == 0 && fi.Mode().Perm()&0o022 == 0
}

// loadClosed reads the scan at path when this process is root and the
// scan may be trusted and used at now: a regular file only root may
// read or write, in a directory only root may write, of this boot, of
// the same skipped directories, scanned less than closedEvery before now.
func loadClosed(path string, now time.Time) (closedScan, bool) {
	var sc closedScan
	if os.Geteuid() != 0 {
		return sc, false
	}
	if di, err := os.Lstat(filepath.Dir(path)); err != nil || !di.IsDir() || !rootOnly(di) {
		return sc, false
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return sc, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || !rootOnly(fi) || fi.Mode().Perm()&0o077 != 0 {
		return sc, false
	}
	b, err := io.ReadAll(io.LimitReader(f, maxClosedCache+1))
	if err != nil || len(b) > maxClosedCache || json.Unmarshal(b, &sc) != nil {
		return closedScan{}, false
	}
	age := now.Sub(sc.At)
	if sc.Boot == "" || sc.Boot != hostBootID() || age < 0 || age > closedEvery || !slices.Equal(sc.Skip, hiddenDirs) {
		return closedScan{}, false
	}
	return sc, true
}

// saveClosed writes sc to path for the other daemons, when this process
// is root; best effort.
func saveClosed(path string, sc closedScan) {
	if os.Geteuid() != 0 {
		return
	}
	if sc.Boot = hostBootID(); sc.Boot == "" {
		return
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	if di, err := os.Lstat(dir); err != nil || !di.IsDir() || !rootOnly(di) {
		return
	}
	b, err := json.Marshal(sc)
	if err != nil {
		return
	}
	f, err := os.CreateTemp(dir, ".closed-paths-*")
	if err != nil {
		return
	}
	tmp := f.Name()
	_, werr := f.Write(b)
	if cerr := f.Close(); werr != nil || cerr != nil || os.Rename(tmp, path) != nil {
		os.Remove(tmp)
	}
}
