// Package image keeps the OCI images sandboxes start from, in a
// content-addressed store under hutch's state directory: each layer
// unpacked once (package layer) and stacked read-only under every sandbox
// of every image that holds it, and a record per image (its manifest
// digest, its configuration and its layers) under the names it was
// pulled or imported by.
//
// This package reads and writes the store and needs no registry code, so
// that `hutch run --image` finds an image without linking a registry
// client; package image/fetch brings images in (pull, import) and writes
// them here.
//
// Layout, below DIR/images:
//
//	layers/sha256/HEX/   a layer unpacked, named by its diff ID (the
//	                     digest of its uncompressed tar); made in tmp/ and
//	                     renamed here whole, so a layer here is complete
//	layers/sha256/HEX.size  the layer's disk usage, measured once
//	records/HEX.json     an image, named by its manifest digest
//	records/HEX.config   its configuration as the image holds it (the
//	                     blob its manifest names), kept for exports; an
//	                     image brought in before it was kept has none
//	refs.json            name → manifest digest
//	limit.json           the standing size limit (SetLimit), if any
//	locks/HEX            taken (flock) while the image HEX is brought in,
//	                     removed after
//	tmp/                 work in progress; nothing there is trusted
//	lock                 taken (flock) to change refs.json or remove
//
// A pull killed at any point leaves at most files in tmp/ and layers no
// record names: nothing a later pull or sandbox trusts.
package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Config is what a sandbox takes from an image's configuration.
type Config struct {
	Env        []string `json:"env,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
}

// Image is one image in the store.
type Image struct {
	// Digest is the manifest's digest ("sha256:…"): the image's identity.
	Digest string `json:"digest"`
	// Platform is the image's OS and architecture ("linux/amd64").
	Platform string `json:"platform"`
	Config   Config `json:"config"`
	// Layers are the layers' diff IDs, bottom first.
	Layers []string `json:"layers"`
	// Size is the layers' uncompressed size in bytes.
	Size int64 `json:"size"`
	// Added is when the image came into the store.
	Added time.Time `json:"added"`
	// Refs are the names it is known by (filled in by List and Get).
	Refs []string `json:"-"`
}

// Store is an image store.
type Store struct {
	dir string
}

// Errors of the store.
var (
	ErrNotFound = errors.New("no such image")
	ErrBadRef   = errors.New("not an image reference")
)

// Open opens (and makes) the store below stateDir.
func Open(stateDir string) (*Store, error) {
	dir := filepath.Join(stateDir, "images")
	for _, d := range []string{"layers/sha256", "records", "locks", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("image store: %w", err)
		}
	}
	return &Store{dir: dir}, nil
}

// DefaultStateDir is the state directory whose store hutch uses unless
// told otherwise: $HUTCH_STATE_DIR, else /var/lib/hutch for root (shared
// with hutch serve), else $XDG_DATA_HOME/hutch (~/.local/share/hutch).
func DefaultStateDir() string {
	if d := os.Getenv("HUTCH_STATE_DIR"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/lib/hutch"
	}
	if d := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "hutch")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "share", "hutch")
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// isDigest reports whether s is a whole sha256 digest ("sha256:" and 64
// lower-case hex digits).
func isDigest(s string) bool {
	h, ok := strings.CutPrefix(s, "sha256:")
	return ok && len(h) == 64 && isHex(h)
}

// LayerDir is where the layer of diff ID diffID is, unpacked.
func (s *Store) LayerDir(diffID string) (string, error) {
	if !isDigest(diffID) {
		return "", fmt.Errorf("image store: %q is not a sha256 digest", diffID)
	}
	return filepath.Join(s.dir, "layers", "sha256", strings.TrimPrefix(diffID, "sha256:")), nil
}

// HasLayer reports whether the layer diffID is unpacked in the store.
func (s *Store) HasLayer(diffID string) bool {
	d, err := s.LayerDir(diffID)
	if err != nil {
		return false
	}
	fi, err := os.Lstat(d)
	return err == nil && fi.IsDir()
}

// TempDir makes a directory for work in progress, which the caller
// renames into the store or removes.
func (s *Store) TempDir(pattern string) (string, error) {
	return os.MkdirTemp(filepath.Join(s.dir, "tmp"), pattern)
}

// Put records img under the names refs (normalized; an earlier image of
// the same name loses it). Every layer must be in the store.
func (s *Store) Put(img *Image, refs ...string) error {
	if !isDigest(img.Digest) {
		return fmt.Errorf("image store: %q is not a sha256 digest", img.Digest)
	}
	for _, l := range img.Layers {
		if !s.HasLayer(l) {
			return fmt.Errorf("image store: layer %s of %s is not in the store", l, img.Digest)
		}
	}
	names := make([]string, 0, len(refs))
	for _, r := range refs {
		n, err := Normalize(r)
		if err != nil {
			return err
		}
		names = append(names, n)
	}
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	b, err := json.MarshalIndent(img, "", "  ")
	if err != nil {
		return err
	}
	if err := s.writeFile(s.recordPath(img.Digest), b); err != nil {
		return err
	}
	m, err := s.refs()
	if err != nil {
		return err
	}
	for _, n := range names {
		m[n] = img.Digest
	}
	return s.writeRefs(m)
}

// Get returns the image named ref: a name (normalized as Normalize does)
// or a manifest digest, whole ("sha256:…") or its first 12 or more hex
// digits.
func (s *Store) Get(ref string) (*Image, error) {
	m, err := s.refs()
	if err != nil {
		return nil, err
	}
	digest, err := s.resolve(m, ref)
	if err != nil {
		return nil, err
	}
	img, err := s.record(digest)
	if err != nil {
		return nil, err
	}
	img.Refs = refsOf(m, digest)
	return img, nil
}

// List returns every image, newest first.
func (s *Store) List() ([]*Image, error) {
	m, err := s.refs()
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(filepath.Join(s.dir, "records"))
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	var out []*Image
	for _, e := range ents {
		hex, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		img, err := s.record("sha256:" + hex)
		if err != nil {
			continue
		}
		img.Refs = refsOf(m, img.Digest)
		out = append(out, img)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Added.After(out[j].Added) })
	return out, nil
}

// Remove removes the name ref, or, given a digest, the image and every
// name of it. An image left without names is removed; its layers stay
// until Prune.
func (s *Store) Remove(ref string) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	m, err := s.refs()
	if err != nil {
		return err
	}
	digest, err := s.resolve(m, ref)
	if err != nil {
		return err
	}
	if n, nerr := Normalize(ref); nerr == nil && m[n] == digest {
		delete(m, n)
	} else {
		for _, n := range refsOf(m, digest) {
			delete(m, n)
		}
	}
	if len(refsOf(m, digest)) == 0 {
		if err := s.removeRecord(digest); err != nil {
			return err
		}
	}
	return s.writeRefs(m)
}

// Prune removes the layers no image holds and no sandbox uses, and what
// work in progress left in tmp/ more than a minute ago (a pull running
// now keeps its own), and returns how many layers it removed.
func (s *Store) Prune() (layers int, err error) {
	unlock, err := s.lock()
	if err != nil {
		return 0, err
	}
	defer unlock()
	return s.pruneLocked()
}

func (s *Store) pruneLocked() (layers int, err error) {
	imgs, err := s.List()
	if err != nil {
		return 0, err
	}
	used := map[string]bool{}
	for _, img := range imgs {
		for _, l := range img.Layers {
			used[strings.TrimPrefix(l, "sha256:")] = true
		}
	}
	ents, err := os.ReadDir(filepath.Join(s.dir, "layers", "sha256"))
	if err != nil {
		return 0, fmt.Errorf("image store: %w", err)
	}
	for _, e := range ents {
		if hex, ok := strings.CutSuffix(e.Name(), sizeSuffix); ok {
			if _, err := os.Lstat(filepath.Join(s.dir, "layers", "sha256", hex)); os.IsNotExist(err) {
				_ = os.Remove(filepath.Join(s.dir, "layers", "sha256", e.Name())) // its layer is gone
			}
			continue
		}
		if used[e.Name()] || strings.HasSuffix(e.Name(), ".lock") {
			continue
		}
		release, ok := s.tryLayer(e.Name())
		if !ok {
			continue // a sandbox of a removed image still stacks it
		}
		err := RemoveTree(filepath.Join(s.dir, "layers", "sha256", e.Name()))
		if err == nil {
			_ = os.Remove(filepath.Join(s.dir, "layers", "sha256", e.Name()+sizeSuffix))
		}
		release()
		if err != nil {
			return layers, err
		}
		layers++
	}
	// The configurations without a record: a pull killed before it.
	recs, _ := os.ReadDir(filepath.Join(s.dir, "records"))
	for _, e := range recs {
		if hex, ok := strings.CutSuffix(e.Name(), configSuffix); ok {
			if _, err := os.Lstat(s.recordPath("sha256:" + hex)); os.IsNotExist(err) {
				_ = os.Remove(filepath.Join(s.dir, "records", e.Name()))
			}
		}
	}
	tmp, _ := os.ReadDir(filepath.Join(s.dir, "tmp"))
	for _, e := range tmp {
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > time.Minute {
			_ = RemoveTree(filepath.Join(s.dir, "tmp", e.Name()))
		}
	}
	s.pruneImageLocks()
	s.pruneEROFS()
	return layers, nil
}

// Evict removes images, the least recently used first (Use marks use),
// until the layers take at most maxBytes on disk, then the layers no
// image holds. It passes over an image a sandbox uses and the images
// whose digests keep names. It returns the images removed, with the
// names they had.
func (s *Store) Evict(maxBytes int64, keep ...string) ([]*Image, error) {
	return s.evict(maxBytes, keep, time.Time{})
}

// recentUse is how long after its last use Fit spares an image: the one
// a pull in another process just brought in, until the sandbox that
// asked for it stacks it.
const recentUse = time.Minute

// Fit keeps the store within its standing limit (SetLimit), or within
// maxBytes when that is positive: it evicts as Evict does, but also
// passes over the images used (or brought in) in the last minute, so that
// an image is never taken from under the sandbox about to start from it.
// With no limit it does nothing.
func (s *Store) Fit(maxBytes int64, keep ...string) ([]*Image, error) {
	if maxBytes <= 0 {
		var err error
		if maxBytes, err = s.Limit(); err != nil || maxBytes <= 0 {
			return nil, err
		}
	}
	return s.evict(maxBytes, keep, time.Now().Add(-recentUse))
}

// evict is Evict, which also spares the images used since spareSince.
func (s *Store) evict(maxBytes int64, keep []string, spareSince time.Time) ([]*Image, error) {
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	imgs, err := s.List()
	if err != nil {
		return nil, err
	}
	sizes := map[string]int64{}
	holders := map[string]int{}
	var total int64
	for _, img := range imgs {
		total += s.erofsBytes(img.Digest)
		for _, l := range img.Layers {
			holders[l]++
			if _, ok := sizes[l]; !ok {
				sizes[l] = s.layerSize(l)
				total += sizes[l]
			}
		}
	}
	// Least recently used first: the record's modification time.
	used := map[string]time.Time{}
	for _, img := range imgs {
		used[img.Digest] = s.LastUse(img)
	}
	sort.SliceStable(imgs, func(i, j int) bool { return used[imgs[i].Digest].Before(used[imgs[j].Digest]) })
	m, err := s.refs()
	if err != nil {
		return nil, err
	}
	var removed []*Image
	for _, img := range imgs {
		if total <= maxBytes {
			break
		}
		if slices.Contains(keep, img.Digest) || used[img.Digest].After(spareSince) && !spareSince.IsZero() || s.inUse(img) {
			continue
		}
		for _, n := range refsOf(m, img.Digest) {
			delete(m, n)
		}
		if err := s.removeRecord(img.Digest); err != nil {
			return removed, err
		}
		removed = append(removed, img)
		total -= s.erofsBytes(img.Digest) // Prune removes it
		for _, l := range img.Layers {
			if holders[l]--; holders[l] == 0 {
				total -= sizes[l]
			}
		}
	}
	if len(removed) == 0 {
		return nil, nil
	}
	if err := s.writeRefs(m); err != nil {
		return removed, err
	}
	_, err = s.pruneLocked()
	return removed, err
}

// LastUse is when img was last used (Use: a sandbox started from it) or
// brought in: its record's modification time, the order of eviction.
func (s *Store) LastUse(img *Image) time.Time {
	if fi, err := os.Stat(s.recordPath(img.Digest)); err == nil {
		return fi.ModTime()
	}
	return img.Added
}

// Usage is the disk space the layers of the store's images take, and
// their EROFS roots (EROFS) when built.
func (s *Store) Usage() (int64, error) {
	imgs, err := s.List()
	if err != nil {
		return 0, err
	}
	seen := map[string]bool{}
	var total int64
	for _, img := range imgs {
		total += s.erofsBytes(img.Digest)
		for _, l := range img.Layers {
			if !seen[l] {
				seen[l] = true
				total += s.layerSize(l)
			}
		}
	}
	return total, nil
}

// layerSize is the disk space the layer diffID takes, as its HEX.size
// file beside it records; measured (and recorded) when that is missing.
// A layer in place never changes, so the measure holds as long as it.
func (s *Store) layerSize(diffID string) int64 {
	d, err := s.LayerDir(diffID)
	if err != nil {
		return 0
	}
	if b, err := os.ReadFile(d + sizeSuffix); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n >= 0 {
			return n
		}
	}
	if !s.HasLayer(diffID) {
		return 0
	}
	n := diskUsage(d)
	_ = s.writeFile(d+sizeSuffix, []byte(strconv.FormatInt(n, 10)+"\n"))
	return n
}

// sizeSuffix names the file beside a layer that records its disk usage.
const sizeSuffix = ".size"

// Limit is the store's standing size limit (SetLimit), 0 when it has
// none.
func (s *Store) Limit() (int64, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, limitFile))
	if os.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("image store: %w", err)
	}
	var l struct {
		MaxBytes int64 `json:"max_bytes"`
	}
	if err := json.Unmarshal(b, &l); err != nil || l.MaxBytes < 0 {
		return 0, fmt.Errorf("image store: %s: not a size limit (%v): set it again with hutch image limit", limitFile, err)
	}
	return l.MaxBytes, nil
}

// SetLimit sets the store's standing size limit: after every pull or
// import into the store (Fit), and periodically in hutch serve, the least
// recently used images are removed until the layers take at most
// maxBytes. 0 removes the limit.
func (s *Store) SetLimit(maxBytes int64) error {
	if maxBytes < 0 {
		return fmt.Errorf("image store: a size limit of %d bytes", maxBytes)
	}
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if maxBytes == 0 {
		if err := os.Remove(filepath.Join(s.dir, limitFile)); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("image store: %w", err)
		}
		return nil
	}
	return s.writeFile(filepath.Join(s.dir, limitFile), fmt.Appendf(nil, "{\"max_bytes\": %d}\n", maxBytes))
}

// limitFile holds the store's standing size limit.
const limitFile = "limit.json"

// inUse reports whether a sandbox holds a layer of img (Use).
func (s *Store) inUse(img *Image) bool {
	for _, l := range img.Layers {
		release, ok := s.tryLayer(strings.TrimPrefix(l, "sha256:"))
		if !ok {
			return true
		}
		release()
	}
	return false
}

// diskUsage is the disk space the files below dir take.
func diskUsage(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

func (s *Store) recordPath(digest string) string {
	return filepath.Join(s.dir, "records", strings.TrimPrefix(digest, "sha256:")+".json")
}

// configSuffix names the file beside a record that keeps the image's
// configuration.
const configSuffix = ".config"

func (s *Store) configPath(digest string) string {
	return filepath.Join(s.dir, "records", strings.TrimPrefix(digest, "sha256:")+configSuffix)
}

// removeRecord removes the record of the image digest and its
// configuration.
func (s *Store) removeRecord(digest string) error {
	if err := os.Remove(s.recordPath(digest)); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("image store: %w", err)
	}
	_ = os.Remove(s.configPath(digest))
	return nil
}

// maxConfig bounds an image's configuration as the store keeps it.
const maxConfig = 4 << 20

// PutConfig keeps raw, the configuration of the image digest as its
// manifest names it, for exports (ConfigFile); a configuration larger
// than 4 MiB is not kept.
func (s *Store) PutConfig(digest string, raw []byte) error {
	if !isDigest(digest) {
		return fmt.Errorf("image store: %q is not a sha256 digest", digest)
	}
	if len(raw) > maxConfig {
		return nil
	}
	return s.writeFile(s.configPath(digest), raw)
}

// ConfigFile is the configuration of the image digest as it came in
// (PutConfig), or nil when the store does not keep it (an image brought
// in before it did).
func (s *Store) ConfigFile(digest string) ([]byte, error) {
	if !isDigest(digest) {
		return nil, fmt.Errorf("image store: %q is not a sha256 digest", digest)
	}
	b, err := os.ReadFile(s.configPath(digest))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	return b, nil
}

func (s *Store) record(digest string) (*Image, error) {
	b, err := os.ReadFile(s.recordPath(digest))
	if os.IsNotExist(err) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, digest)
	}
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	var img Image
	if err := json.Unmarshal(b, &img); err != nil {
		return nil, fmt.Errorf("image store: record %s: %w", digest, err)
	}
	return &img, nil
}

// resolve finds the digest ref names.
func (s *Store) resolve(m map[string]string, ref string) (string, error) {
	if isDigest(ref) {
		if _, err := os.Stat(s.recordPath(ref)); err != nil {
			return "", fmt.Errorf("%w: %s", ErrNotFound, ref)
		}
		return ref, nil
	}
	if n, err := Normalize(ref); err == nil {
		if d, ok := m[n]; ok {
			return d, nil
		}
	}
	if prefix := strings.TrimPrefix(ref, "sha256:"); len(prefix) >= 12 && isHex(prefix) {
		var found []string
		ents, _ := os.ReadDir(filepath.Join(s.dir, "records"))
		for _, e := range ents {
			if hex, ok := strings.CutSuffix(e.Name(), ".json"); ok && strings.HasPrefix(hex, prefix) {
				found = append(found, "sha256:"+hex)
			}
		}
		switch len(found) {
		case 1:
			return found[0], nil
		case 0:
		default:
			return "", fmt.Errorf("image store: %q names %d images", ref, len(found))
		}
	}
	return "", fmt.Errorf("%w: %s", ErrNotFound, ref)
}

func isHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func refsOf(m map[string]string, digest string) []string {
	var out []string
	for n, d := range m {
		if d == digest {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

func (s *Store) refs() (map[string]string, error) {
	m := map[string]string{}
	b, err := os.ReadFile(filepath.Join(s.dir, "refs.json"))
	if os.IsNotExist(err) {
		return m, nil
	}
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("image store: refs.json: %w", err)
	}
	return m, nil
}

func (s *Store) writeRefs(m map[string]string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return s.writeFile(filepath.Join(s.dir, "refs.json"), b)
}

// writeFile replaces path with b whole: written beside it, synced and
// renamed over it.
func (s *Store) writeFile(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "write-")
	if err != nil {
		return fmt.Errorf("image store: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("image store: %w", err)
	}
	return nil
}
