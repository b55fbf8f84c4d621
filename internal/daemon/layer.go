package daemon

import (
	"errors"
	"path"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// DefaultWorkspace is the commands' working directory in a sandbox whose
// policy names none: a directory of its writable root.
const DefaultWorkspace = "/workspace"

// Defaults of Config.DefaultDisk, MaxDisk, DefaultMemory, MaxMemory and
// MaxTmp.
const (
	defaultDisk      = 1 << 30
	defaultMaxDisk   = 16 << 30
	defaultMemory    = 1 << 30
	defaultMaxMemory = 16 << 30
	defaultMaxTmp    = 1 << 30
)

// hiddenDirs are the host directories every sandbox sees empty (and may
// fill, in its own layer): home directories, runtime state, logs, mail and
// spools, backups and private keys. On a host root seen through the
// sandbox's idmapped layer, files only root may read would be readable by
// the sandbox's root, which owns them there; the default deny-read list
// masks the known credential files, and these directories go whole. The
// host's /tmp goes too: every sandbox mounts its own tmpfs there, so the
// layer's /tmp is never a sandbox's, and what other processes of the host
// do in theirs would otherwise show in diffs (and in the closed scan).
var hiddenDirs = []string{
	"/root", "/home", "/run", "/tmp", "/var/run", "/var/tmp", "/var/log", "/var/backups",
	"/var/mail", "/var/spool", "/etc/ssl/private", "/mnt", "/media",
}

// hidden is what every sandbox of m sees empty: hiddenDirs and the daemon's
// state directory (the store, the audit log, the other sandboxes).
func (m *Manager) hidden() []string {
	return append(slices.Clone(hiddenDirs), m.cfg.StateDir)
}

// rootLayer is the writable root of a sandbox of m with spec: its size,
// and what of the host's root it must not see (hidden and closed paths).
func (m *Manager) rootLayer(spec policy.Spec) *sandbox.RootLayer {
	dirs, files := closedPaths()
	return &sandbox.RootLayer{
		SizeBytes: spec.Resources.DiskBytes,
		Hide:      append(m.hidden(), dirs...),
		Remove:    files,
	}
}

// workspaceOf is the workspace a policy asks for, DefaultWorkspace when it
// names none.
func workspaceOf(p policy.Spec) string {
	if p.Filesystem.Workspace == "" {
		return DefaultWorkspace
	}
	return filepath.Clean(p.Filesystem.Workspace)
}

// closedEvery is how old the list of the host's closed paths may get before
// a create starts a new scan (and goes on with the old list meanwhile).
const closedEvery = 5 * time.Minute

// closed is the process's list of the host root's paths closed to other
// users, shared by every manager: scanning takes a second or more.
var closed struct {
	mu       sync.Mutex
	ready    chan struct{} // closed once the first scan is done
	scanning bool
	at       time.Time
	dirs     []string // directories other users may not list or enter
	files    []string // files other users may not read
}

// closedPaths returns the directories and files of the host's root that
// other users may not read (or list, or enter), as of a recent scan.
// Through a sandbox's idmapped layer their owners would be the sandbox's
// own ids, which could read them; the layer shows those directories empty
// and those files not at all. The first call waits for a scan; later ones
// start a new scan in the background when the list is older than
// closedEvery.
func closedPaths() (dirs, files []string) {
	closed.mu.Lock()
	if closed.ready == nil {
		closed.ready = make(chan struct{})
		closed.scanning = true
		go rescanClosed()
	} else if !closed.scanning && time.Since(closed.at) > closedEvery {
		closed.scanning = true
		go rescanClosed()
	}
	ready := closed.ready
	closed.mu.Unlock()
	<-ready
	closed.mu.Lock()
	defer closed.mu.Unlock()
	return closed.dirs, closed.files
}

// rescanClosed scans the host's root for closed paths and publishes them.
func rescanClosed() {
	dirs, files := scanClosed("/", hiddenDirs)
	closed.mu.Lock()
	if closed.ready == nil {
		closed.ready = make(chan struct{})
	}
	closed.dirs, closed.files, closed.at, closed.scanning = dirs, files, time.Now(), false
	select {
	case <-closed.ready:
	default:
		close(closed.ready)
	}
	closed.mu.Unlock()
}

// imageLayer is the root of a sandbox of m started from the image ref of
// the daemon's image store: its layers, read-only, under the sandbox's
// own writes. The image's layers are held in use until release is called.
// An image not in the store is refused: the daemon pulls nothing on a
// tenant's word (an operator brings images in with hutch image). The
// image's user (its own passwd's) owns the workspace, and is who
// commands run as unless they say.
func (m *Manager) imageLayer(ref string, spec policy.Spec) (*image.Image, image.User, *sandbox.RootLayer, func(), error) {
	img, err := m.images.Get(ref)
	if errors.Is(err, image.ErrNotFound) || errors.Is(err, image.ErrBadRef) {
		return nil, image.User{}, nil, nil, invalid("create sandbox: policy: root: image %s is not in the daemon's image store (hutch image pull --state-dir %s %s)", ref, m.cfg.StateDir, ref)
	}
	if err != nil {
		return nil, image.User{}, nil, nil, err
	}
	u, err := m.images.User(img)
	if err != nil {
		return nil, image.User{}, nil, nil, invalid("create sandbox: policy: root: %v", err)
	}
	l := &sandbox.RootLayer{SizeBytes: spec.Resources.DiskBytes, UID: u.UID, GID: u.GID}
	var release func()
	if l.Lowers, release, err = m.images.Stack(img); err != nil {
		return nil, image.User{}, nil, nil, err
	}
	if spec.Tier == policy.TierMicroVM {
		// A guest mounts the image from a block device: its EROFS
		// root, built the first time.
		path, rel, err := m.images.EROFS(img)
		if err != nil {
			release()
			return nil, image.User{}, nil, nil, err
		}
		l.EROFS, release = path, chain(release, rel)
	}
	return img, u, l, release, nil
}

// imageAllowed reports whether a tenant may start a sandbox from img,
// named ref: always without Config.AllowImages, else when a pattern there
// matches its name in normal form, or is its digest.
func (m *Manager) imageAllowed(ref string, img *image.Image) bool {
	if len(m.cfg.AllowImages) == 0 {
		return true
	}
	name, _ := image.Normalize(ref)
	for _, p := range m.cfg.AllowImages {
		if p == img.Digest {
			return true
		}
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}
