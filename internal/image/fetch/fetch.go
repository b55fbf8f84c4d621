// Package fetch brings OCI images into hutch's image store (package
// image): from a `docker save` tarball or an OCI layout (a directory or a
// tar of one), and from registries; and it pushes an exported image (an
// OCI layout in a tar, package export) to a registry as it reads it. The registry protocol, manifests and
// their formats are go-containerregistry's; unpacking is package layer's,
// and what is trusted is checked here: every layer's uncompressed content
// against the diff ID the image's configuration names (the configuration
// itself is named by the manifest's digest), while it is unpacked, before
// anything of it enters the store.
package fetch

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/layer"
)

// parallelLayers is how many layers of an image are fetched and unpacked
// at once.
const parallelLayers = 3

// Options say how layers are unpacked.
type Options struct {
	// Root: hutch runs as root, so layers keep the owners they name and
	// mark opaque directories with trusted.overlay.opaque; otherwise they
	// belong to the user and use user.overlay.opaque (an overlayfs mount
	// with userxattr).
	Root bool
	// Limits bound each layer (layer.DefaultLimits when zero).
	Limits layer.Limits
	// Progress, if set, is told of an image as it starts, and of each of
	// its layers as it starts and ends.
	Progress func(Event)
	// Fetched, if set, is told of the layers' bytes as they come in: a
	// pull's compressed bytes as they arrive from the registry, an
	// import's layers as they are read. It is called from several
	// goroutines at once.
	Fetched func(n int64)
	// Warn, if set, receives what unpacking stripped or skipped, and why
	// the store could not be kept within its size limit.
	Warn func(string)
	// MaxBytes, when positive, is the size the store is kept within once
	// the image is in, instead of the store's standing limit
	// (image.Store.Fit): the least recently used images go, never this
	// one nor one in use.
	MaxBytes int64
	// Evicted, if set, is told of each image removed to keep the store
	// within its limit.
	Evicted func(*image.Image)

	// compressed: the layers are fetched compressed (a pull), and
	// Fetched counts those bytes.
	compressed bool
	// platform, if set, is the platform the image must be for (a pull's).
	platform *v1.Platform
}

// Event is a step of bringing an image in: the image's start (Index 0),
// then each layer's start and end.
type Event struct {
	Image  string // the image's manifest digest
	Layer  string // diff ID; "" at the image's start
	Index  int    // 1-based, of Count; 0 at the image's start
	Count  int
	Cached bool  // already in the store
	Done   bool  // unpacked (or found)
	Bytes  int64 // uncompressed, when done
	// Size is what there is to fetch, when it is known (a pull's
	// compressed sizes, from the manifest): the layer's, and at the
	// image's start the sum of those the store lacks.
	Size int64
	Took time.Duration // fetching and unpacking it, when done
}

// Add brings img into the store under the names refs: its layers, each
// verified while it is unpacked and unpacked once (a layer already in the
// store is not read again; two Adds at once unpack it once), then its
// record. A layer that fails leaves nothing behind.
func Add(s *image.Store, img v1.Image, refs []string, opt Options) (*image.Image, error) {
	digest, err := img.Digest()
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	unlock, err := s.LockImage(digest.String())
	if err != nil {
		return nil, err
	}
	defer unlock()
	if rec, err := s.Get(digest.String()); err == nil && slices.IndexFunc(rec.Layers, func(l string) bool { return !s.HasLayer(l) }) < 0 {
		// In the store whole (perhaps brought in by a pull that held the
		// lock first): named, and nothing fetched.
		if err := checkPlatform(rec.Digest, rec.Platform, opt); err != nil {
			return nil, err
		}
		if err := keepConfig(s, img, rec.Digest); err != nil {
			return nil, err
		}
		Layers.With("cached").Add(float64(len(rec.Layers)))
		if opt.Progress != nil {
			opt.Progress(Event{Image: rec.Digest, Count: len(rec.Layers)})
			for i, l := range rec.Layers {
				opt.Progress(Event{Image: rec.Digest, Layer: l, Index: i + 1, Count: len(rec.Layers), Cached: true, Done: true})
			}
		}
		return put(s, rec, refs, opt)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image %s: configuration: %w", digest, err)
	}
	if err := checkPlatform(digest.String(), platform(cf), opt); err != nil {
		return nil, err
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, fmt.Errorf("image %s: layers: %w", digest, err)
	}
	if len(layers) != len(cf.RootFS.DiffIDs) {
		return nil, fmt.Errorf("image %s: %d layers, but its configuration names %d", digest, len(layers), len(cf.RootFS.DiffIDs))
	}
	rec := &image.Image{
		Digest:   digest.String(),
		Platform: platform(cf),
		Config: image.Config{
			Env: cf.Config.Env, Entrypoint: cf.Config.Entrypoint, Cmd: cf.Config.Cmd,
			WorkingDir: cf.Config.WorkingDir, User: cf.Config.User,
		},
		Added: time.Now().UTC(),
	}
	if opt.Progress != nil {
		start := Event{Image: rec.Digest, Count: len(layers)}
		for i, l := range layers {
			if !s.HasLayer(cf.RootFS.DiffIDs[i].String()) {
				start.Size += compressedSize(l, opt)
			}
		}
		opt.Progress(start)
	}
	// Layers are fetched and unpacked a few at once: one layer's download
	// waits on the network while another's decompression and files take
	// the CPU.
	type result struct {
		n   int64
		err error
	}
	results := make([]result, len(layers))
	sem := make(chan struct{}, parallelLayers)
	var wg sync.WaitGroup
	var progressMu sync.Mutex
	for i, l := range layers {
		diffID := cf.RootFS.DiffIDs[i].String()
		rec.Layers = append(rec.Layers, diffID)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			o := opt
			if opt.Progress != nil {
				o.Progress = func(e Event) { progressMu.Lock(); defer progressMu.Unlock(); opt.Progress(e) }
			}
			t0 := time.Now()
			n, cached, err := addLayer(s, l, rec.Digest, diffID, o, i+1, len(layers))
			results[i] = result{n, err}
			switch {
			case err != nil:
				Layers.With("refused").Inc()
			case cached:
				Layers.With("cached").Inc()
			default:
				Layers.With("unpacked").Inc()
				Bytes.With().Add(float64(n))
				UnpackSeconds.With().Observe(time.Since(t0).Seconds())
			}
			if err == nil && o.Progress != nil {
				o.Progress(Event{Image: rec.Digest, Layer: diffID, Index: i + 1, Count: len(layers), Cached: cached, Done: true,
					Bytes: n, Size: compressedSize(l, o), Took: time.Since(t0)})
			}
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r.err != nil {
			return nil, fmt.Errorf("image %s: layer %s: %w", digest, rec.Layers[i], r.err)
		}
		rec.Size += r.n
	}
	if err := keepConfig(s, img, rec.Digest); err != nil {
		return nil, err
	}
	return put(s, rec, refs, opt)
}

// keepConfig keeps img's configuration in the store, as its manifest
// names it, for exports (image.Store.ConfigFile), unless it is kept.
func keepConfig(s *image.Store, img v1.Image, digest string) error {
	if b, err := s.ConfigFile(digest); err != nil || b != nil {
		return err
	}
	raw, err := img.RawConfigFile()
	if err != nil {
		return fmt.Errorf("image %s: configuration: %w", digest, err)
	}
	return s.PutConfig(digest, raw)
}

// put records rec under refs, then keeps the store within its limit.
func put(s *image.Store, rec *image.Image, refs []string, opt Options) (*image.Image, error) {
	if err := s.Put(rec, refs...); err != nil {
		return nil, err
	}
	evicted, err := s.Fit(opt.MaxBytes, rec.Digest)
	if err != nil && opt.Warn != nil {
		opt.Warn(fmt.Sprintf("keeping the image store within its size limit: %v", err))
	}
	if opt.Evicted != nil {
		for _, img := range evicted {
			opt.Evicted(img)
		}
	}
	return s.Get(rec.Digest)
}

// checkPlatform refuses an image of platform p (digest) that is not for
// the platform a pull asked for.
func checkPlatform(digest, p string, opt Options) error {
	if opt.platform != nil && !platformMatches(p, *opt.platform) {
		return fmt.Errorf("image %s is for %s, not %s", digest, p, opt.platform)
	}
	return nil
}

// compressedSize is the size of l to fetch, when it is known without
// reading it: a pull's layer's, from the manifest.
func compressedSize(l v1.Layer, opt Options) int64 {
	if !opt.compressed {
		return 0
	}
	n, err := l.Size()
	if err != nil {
		return 0
	}
	return n
}

// countedLayer is a layer whose compressed bytes are counted as they are
// read.
type countedLayer struct {
	v1.Layer
	count func(int64)
}

func (c countedLayer) Compressed() (io.ReadCloser, error) {
	rc, err := c.Layer.Compressed()
	if err != nil {
		return nil, err
	}
	return countingReader{rc, c.count}, nil
}

// countingReader tells count of every byte read.
type countingReader struct {
	io.ReadCloser
	count func(int64)
}

func (r countingReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if n > 0 {
		r.count(int64(n))
	}
	return n, err
}

// uncompressed opens l's uncompressed bytes, counting what comes in
// (Options.Fetched): for a pull the compressed bytes, for an import the
// layer's own (a docker save layer may be stored uncompressed, and its
// compressed form made on the fly).
func uncompressed(l v1.Layer, opt Options) (io.ReadCloser, error) {
	switch {
	case opt.Fetched == nil:
		return l.Uncompressed()
	case opt.compressed:
		cl, err := partial.CompressedToLayer(countedLayer{l, opt.Fetched})
		if err != nil {
			return nil, err
		}
		return cl.Uncompressed()
	}
	rc, err := l.Uncompressed()
	if err != nil {
		return nil, err
	}
	return countingReader{rc, opt.Fetched}, nil
}

// addLayer unpacks l, whose configuration names diffID, into the store
// unless it is there, and returns its uncompressed size (the unpacked
// tree's, for a cached layer: 0).
func addLayer(s *image.Store, l v1.Layer, imageDigest, diffID string, opt Options, index, count int) (int64, bool, error) {
	if s.HasLayer(diffID) {
		return 0, true, nil
	}
	unlock, err := s.LockLayer(diffID)
	if err != nil {
		return 0, false, err
	}
	defer unlock()
	if s.HasLayer(diffID) {
		return 0, true, nil // unpacked by another pull meanwhile
	}
	if opt.Progress != nil {
		opt.Progress(Event{Image: imageDigest, Layer: diffID, Index: index, Count: count, Size: compressedSize(l, opt)})
	}
	tmp, err := s.TempDir("layer-")
	if err != nil {
		return 0, false, err
	}
	keep := false
	defer func() {
		if !keep {
			_ = image.RemoveTree(tmp)
		}
	}()
	rc, err := uncompressed(l, opt)
	if err != nil {
		return 0, false, err
	}
	defer rc.Close()
	h := sha256.New()
	tee := io.TeeReader(rc, h)
	lopt := layer.Options{Limits: opt.Limits, OpaqueXattr: "user.overlay.opaque"}
	if opt.Root {
		lopt.OpaqueXattr = "trusted.overlay.opaque"
		lopt.Owner = func(uid, gid int) (int, int) { return uid, gid }
	}
	rep, err := layer.Unpack(tee, tmp, lopt)
	if err != nil {
		return 0, false, err
	}
	// What follows the tar's end (padding) counts for the digest too.
	limit := lopt.Limits.Bytes
	if limit <= 0 {
		limit = layer.DefaultLimits.Bytes
	}
	extra, err := io.Copy(io.Discard, io.LimitReader(tee, limit-rep.Bytes+1))
	if err != nil {
		return 0, false, err
	}
	if rep.Bytes+extra > limit {
		return 0, false, layer.ErrTooLarge
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != diffID {
		return 0, false, fmt.Errorf("its content is %s, not what the image's configuration names: refused", got)
	}
	if opt.Warn != nil {
		for _, w := range append(rep.Stripped, rep.Skipped...) {
			opt.Warn(fmt.Sprintf("layer %s: %s", diffID, w))
		}
	}
	// The layer's top is the root directory of the sandbox's view.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return 0, false, err
	}
	dst, err := s.LayerDir(diffID)
	if err != nil {
		return 0, false, err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return 0, false, err
	}
	keep = true
	return rep.Bytes + extra, false, nil
}

func platform(cf *v1.ConfigFile) string {
	p := cf.OS + "/" + cf.Architecture
	if cf.Variant != "" {
		p += "/" + cf.Variant
	}
	return p
}

// Import brings in the images of the file or directory at path: a
// `docker save` tarball (each image under its tags), or an OCI image
// layout, a directory or a tar of one (each image under its
// org.opencontainers.image.ref.name, taken as a tag of name when it is not
// a whole reference). An image without a name is kept by its digest only.
func Import(s *image.Store, path, repo string, opt Options) ([]*image.Image, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	if fi.IsDir() {
		return importLayout(s, path, repo, opt)
	}
	if m, err := tarball.LoadManifest(opener(path)); err == nil && len(m) > 0 {
		return importDockerSave(s, path, m, opt)
	}
	// An OCI layout in a tar: unpacked (as hostile as a layer) into the
	// store's tmp/, then read as a directory.
	tmp, err := s.TempDir("import-")
	if err != nil {
		return nil, err
	}
	defer image.RemoveTree(tmp)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	defer f.Close()
	if _, err := layer.Unpack(f, tmp, layer.Options{Limits: opt.Limits}); err != nil {
		return nil, fmt.Errorf("import %s: neither a docker save tarball nor an OCI layout: %w", path, err)
	}
	if _, err := os.Stat(filepath.Join(tmp, "oci-layout")); err != nil {
		return nil, fmt.Errorf("import %s: neither a docker save tarball (no manifest.json) nor an OCI layout (no oci-layout)", path)
	}
	return importLayout(s, tmp, repo, opt)
}

func opener(path string) tarball.Opener {
	return func() (io.ReadCloser, error) { return os.Open(path) }
}

func importDockerSave(s *image.Store, path string, m tarball.Manifest, opt Options) ([]*image.Image, error) {
	var out []*image.Image
	for i, d := range m {
		var tag *name.Tag
		if len(d.RepoTags) > 0 {
			t, err := name.NewTag(d.RepoTags[0])
			if err != nil {
				return out, fmt.Errorf("import %s: image %d: tag %q: %w", path, i+1, d.RepoTags[0], err)
			}
			tag = &t
		} else if len(m) > 1 {
			return out, fmt.Errorf("import %s: image %d has no tag, and the tarball holds %d images", path, i+1, len(m))
		}
		img, err := tarball.Image(opener(path), tag)
		if err != nil {
			return out, fmt.Errorf("import %s: %w", path, err)
		}
		rec, err := Add(s, img, d.RepoTags, opt)
		if err != nil {
			return out, fmt.Errorf("import %s: %w", path, err)
		}
		out = append(out, rec)
	}
	return out, nil
}

func importLayout(s *image.Store, dir, repo string, opt Options) ([]*image.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", dir, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", dir, err)
	}
	var out []*image.Image
	for _, d := range im.Manifests {
		if !d.MediaType.IsImage() {
			continue // nested indexes: a platform is chosen on pull
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return out, fmt.Errorf("import %s: %s: %w", dir, d.Digest, err)
		}
		var refs []string
		if n := d.Annotations["org.opencontainers.image.ref.name"]; n != "" {
			if _, err := image.Normalize(n); err == nil && strings.ContainsAny(n, "/:") {
				refs = append(refs, n)
			} else if repo != "" {
				refs = append(refs, repo+":"+n)
			}
		}
		rec, err := Add(s, img, refs, opt)
		if err != nil {
			return out, fmt.Errorf("import %s: %w", dir, err)
		}
		out = append(out, rec)
	}
	if len(out) == 0 {
		return nil, errors.New("import " + dir + ": the layout holds no image")
	}
	return out, nil
}
