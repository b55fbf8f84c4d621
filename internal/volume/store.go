package volume

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// Errors of the store, which the API maps to its statuses.
var (
	// ErrInvalid is a name or request the store refuses.
	ErrInvalid = errors.New("invalid")
	// ErrNotFound is a volume the tenant does not have.
	ErrNotFound = errors.New("not found")
	// ErrExists is a name the tenant has already.
	ErrExists = errors.New("exists")
	// ErrBusy is a volume a sandbox uses (or one being created uses).
	ErrBusy = errors.New("in use")
	// ErrQuota is a tenant at its most volumes.
	ErrQuota = errors.New("quota")
)

// Defaults of Config.
const (
	DefaultSize       = 1 << 30
	DefaultMaxVolumes = 20
	// MinSize is the smallest volume: ext4's journal and metadata need
	// room.
	MinSize = 8 << 20
	// MaxName is the longest name.
	MaxName = 128
	// IDPrefix starts every volume id; a name may not start with it.
	IDPrefix = "vol_"
	// DataDir is the directory of a volume's filesystem users see.
	DataDir = "data"
)

var nameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// Volume is one volume as the index keeps it.
type Volume struct {
	ID      string    `json:"id"`
	Tenant  string    `json:"tenant"`
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
}

// Config configures a Store.
type Config struct {
	// Dir is the store's directory (made 0700 if missing).
	Dir string
	// Size is the size, in bytes, of a new volume's filesystem, its
	// quota (default DefaultSize, at least MinSize).
	Size int64
	// MaxVolumes is the most volumes a tenant may keep (default
	// DefaultMaxVolumes).
	MaxVolumes int
}

// Store keeps the volumes. Safe for concurrent use.
type Store struct {
	dir  string
	size int64
	max  int
	key  []byte

	mu    sync.Mutex
	vols  []Volume       // oldest first
	holds map[string]int // by id: creates of sandboxes that will use it

	openErr error // what Open could not mount
}

// Open opens (or makes) the store in cfg.Dir and mounts its volumes that
// are not mounted yet (reusing those a previous daemon left mounted); see
// MountErrors.
func Open(cfg Config) (*Store, error) {
	if cfg.Size == 0 {
		cfg.Size = DefaultSize
	}
	if cfg.Size < MinSize {
		return nil, fmt.Errorf("volumes: size %d bytes: at least %d", cfg.Size, MinSize)
	}
	if cfg.MaxVolumes == 0 {
		cfg.MaxVolumes = DefaultMaxVolumes
	}
	if cfg.MaxVolumes < 0 {
		return nil, fmt.Errorf("volumes: negative most volumes %d", cfg.MaxVolumes)
	}
	if !filepath.IsAbs(cfg.Dir) {
		return nil, fmt.Errorf("volumes: directory %q is not absolute", cfg.Dir)
	}
	s := &Store{dir: filepath.Clean(cfg.Dir), size: cfg.Size, max: cfg.MaxVolumes, holds: map[string]int{}}
	if err := os.MkdirAll(filepath.Join(s.dir, "mnt"), 0o700); err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	if err := os.Chmod(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	key, err := loadKey(filepath.Join(s.dir, "token.key"))
	if err != nil {
		return nil, err
	}
	s.key = key
	b, err := os.ReadFile(s.indexPath())
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("volumes: %w", err)
	default:
		if err := json.Unmarshal(b, &s.vols); err != nil {
			return nil, fmt.Errorf("volumes: %s: %w", s.indexPath(), err)
		}
	}
	// A volume that does not mount now is tried again when used (Dir,
	// Hold): one broken image keeps no other volume, and no daemon, from
	// working.
	var errs []error
	for _, v := range s.vols {
		if _, err := s.mount(v.ID); err != nil {
			errs = append(errs, err)
		}
	}
	s.openErr = errors.Join(errs...)
	return s, nil
}

// MountErrors says which volumes Open could not mount (nil: none), for
// the daemon's log; each is tried again when used.
func (s *Store) MountErrors() error { return s.openErr }

// Close lets go of the store. The volumes stay mounted, for sandboxes
// that still use them and for the next Open to reuse.
func (s *Store) Close() error { return nil }

// loadKey reads the token key at path, making it if missing.
func loadKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil && len(b) == 32 {
		return b, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	if err == nil {
		return nil, fmt.Errorf("volumes: %s: %d bytes, want 32", path, len(b))
	}
	b = make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	return b, nil
}

func (s *Store) indexPath() string { return filepath.Join(s.dir, "index.json") }

// ImagePath is the image file of volume id.
func (s *Store) ImagePath(id string) string { return filepath.Join(s.dir, id+".img") }

// MountPoint is where volume id's image is mounted.
func (s *Store) MountPoint(id string) string { return filepath.Join(s.dir, "mnt", id) }

// save writes the index. Under s.mu.
func (s *Store) save() error {
	b, err := json.MarshalIndent(s.vols, "", "\t")
	if err != nil {
		return err
	}
	tmp := s.indexPath() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("volumes: %w", err)
	}
	if err := os.Rename(tmp, s.indexPath()); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("volumes: %w", err)
	}
	return nil
}

// CheckName checks a volume's name: E2B's pattern, at most MaxName
// characters, not starting with IDPrefix.
func CheckName(name string) error {
	switch {
	case name == "" || len(name) > MaxName || !nameRE.MatchString(name):
		return errorf(ErrInvalid, "volume name %.140q: want 1 to %d letters, digits, '_' or '-'", name, MaxName)
	case strings.HasPrefix(name, IDPrefix):
		return errorf(ErrInvalid, "volume name %q: the prefix %s is reserved for volume ids", name, IDPrefix)
	}
	return nil
}

// Create makes tenant's volume name: an image of the store's size,
// formatted and mounted, its data directory owned by root, mode 0755.
func (s *Store) Create(tenant, name string) (Volume, error) {
	if tenant == "" {
		return Volume{}, errorf(ErrInvalid, "empty tenant")
	}
	if err := CheckName(name); err != nil {
		return Volume{}, err
	}
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Volume{}, err
	}
	v := Volume{ID: IDPrefix + hex.EncodeToString(b[:]), Tenant: tenant, Name: name, Created: time.Now().UTC()}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, o := range s.vols {
		if o.Tenant != tenant {
			continue
		}
		if o.Name == name {
			return Volume{}, errorf(ErrExists, "volume %q exists", name)
		}
		n++
	}
	if n >= s.max {
		return Volume{}, errorf(ErrQuota, "a tenant may keep at most %d volumes", s.max)
	}
	// Made under the lock: creates are rare, and a name is then never
	// made twice.
	if err := s.makeImage(v.ID); err != nil {
		return Volume{}, err
	}
	if _, err := s.mount(v.ID); err != nil {
		os.Remove(s.ImagePath(v.ID))
		return Volume{}, err
	}
	s.vols = append(s.vols, v)
	if err := s.save(); err != nil {
		s.vols = s.vols[:len(s.vols)-1]
		s.unmountRemove(v.ID)
		return Volume{}, err
	}
	return v, nil
}

// makeImage makes and formats volume id's image.
func (s *Store) makeImage(id string) error {
	img := s.ImagePath(id)
	f, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("volume %s: %w", id, err)
	}
	err = f.Truncate(s.size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(img)
		return fmt.Errorf("volume %s: %w", id, err)
	}
	// No reserved blocks (the quota is the whole image), inode tables
	// and journal initialised lazily (by the kernel, later) for speed.
	cmd := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", "-L", "hutch-volume",
		"-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner=0:0", img)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(img)
		return fmt.Errorf("volume %s: mkfs.ext4: %v: %s", id, err, bytes.TrimSpace(out))
	}
	return nil
}

// List returns tenant's volumes, newest first.
func (s *Store) List(tenant string) []Volume {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Volume
	for _, v := range slices.Backward(s.vols) {
		if v.Tenant == tenant {
			out = append(out, v)
		}
	}
	return out
}

// find returns the index of tenant's volume ref (its id or name), -1 if
// none. Under s.mu.
func (s *Store) find(tenant, ref string) int {
	return slices.IndexFunc(s.vols, func(v Volume) bool {
		return v.Tenant == tenant && (v.ID == ref || v.Name == ref)
	})
}

// Get returns tenant's volume ref, its id or its name.
func (s *Store) Get(tenant, ref string) (Volume, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.find(tenant, ref)
	if i < 0 || tenant == "" {
		return Volume{}, errorf(ErrNotFound, "volume %.140q not found", ref)
	}
	return s.vols[i], nil
}

// ByID returns volume id, whoever's it is.
func (s *Store) ByID(id string) (Volume, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.vols, func(v Volume) bool { return v.ID == id })
	if i < 0 {
		return Volume{}, false
	}
	return s.vols[i], true
}

// Token returns volume id's token, which E2B's content API takes: an
// HMAC of the id with the store's key.
func (s *Store) Token(id string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("hutch volume token\x00" + id))
	return hex.EncodeToString(m.Sum(nil))
}

// noVolume is what CheckToken compares a token with for a volume that
// does not exist.
var noVolume = strings.Repeat("-", 64)

// CheckToken returns volume id if tok is its token; the comparison takes
// the same time whether the volume exists or not.
func (s *Store) CheckToken(id, tok string) (Volume, bool) {
	v, ok := s.ByID(id)
	want := noVolume
	if ok {
		want = s.Token(id)
	}
	match := subtle.ConstantTimeCompare([]byte(want), []byte(tok)) == 1
	return v, ok && match
}

// Dir returns the data directory of volume id, mounting its image if it
// is not mounted.
func (s *Store) Dir(id string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.ContainsFunc(s.vols, func(v Volume) bool { return v.ID == id }) {
		return "", errorf(ErrNotFound, "volume %.140q not found", id)
	}
	return s.mount(id)
}

// Hold returns tenant's volume ref and its data directory, and keeps
// Delete from removing it until release is called: for a sandbox's create,
// after which the daemon's record of the sandbox says it uses it.
func (s *Store) Hold(tenant, ref string) (v Volume, dir string, release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.find(tenant, ref)
	if i < 0 || tenant == "" {
		return Volume{}, "", nil, errorf(ErrNotFound, "volume %.140q not found", ref)
	}
	v = s.vols[i]
	if dir, err = s.mount(v.ID); err != nil {
		return Volume{}, "", nil, err
	}
	s.holds[v.ID]++
	var once sync.Once
	return v, dir, func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.holds[v.ID]--; s.holds[v.ID] <= 0 {
				delete(s.holds, v.ID)
			}
		})
	}, nil
}

// Delete removes tenant's volume ref (id or name): unmounted, its image
// gone. inUse, called under the store's lock (so that no create holds the
// volume meanwhile), reports whether a sandbox uses the volume whose data
// directory is dir: then the volume is ErrBusy.
func (s *Store) Delete(tenant, ref string, inUse func(v Volume, dir string) (bool, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.find(tenant, ref)
	if i < 0 || tenant == "" {
		return errorf(ErrNotFound, "volume %.140q not found", ref)
	}
	v := s.vols[i]
	if s.holds[v.ID] > 0 {
		return errorf(ErrBusy, "volume %q: a sandbox being created uses it", v.Name)
	}
	if inUse != nil {
		busy, err := inUse(v, filepath.Join(s.MountPoint(v.ID), DataDir))
		if err != nil {
			return err
		}
		if busy {
			return errorf(ErrBusy, "volume %q: a sandbox uses it", v.Name)
		}
	}
	if err := s.unmount(v.ID); err != nil {
		return err
	}
	s.vols = slices.Delete(s.vols, i, i+1)
	if err := s.save(); err != nil {
		s.vols = slices.Insert(s.vols, i, v)
		return err
	}
	if err := os.Remove(s.ImagePath(v.ID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("volume %s: %w", v.ID, err)
	}
	return nil
}

// unmountRemove undoes a create that failed late.
func (s *Store) unmountRemove(id string) {
	_ = s.unmount(id)
	os.Remove(s.ImagePath(id))
}

// catError is an error of one of the store's categories (ErrInvalid...)
// with its own message.
type catError struct {
	cat error
	msg string
}

func (e *catError) Error() string { return e.msg }
func (e *catError) Unwrap() error { return e.cat }

// errorf returns an error of category cat.
func errorf(cat error, format string, args ...any) error {
	return &catError{cat: cat, msg: fmt.Sprintf(format, args...)}
}
