package image

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// lock takes the store's lock (flock on DIR/images/lock), which every
// change of names and every removal holds; the returned function drops it.
func (s *Store) lock() (func(), error) {
	return flock(filepath.Join(s.dir, "lock"))
}

// LockLayer takes the lock of one layer while it is unpacked, so that two
// pulls of an image at once unpack each layer once: the second finds it
// done when it gets the lock.
func (s *Store) LockLayer(diffID string) (func(), error) {
	d, err := s.LayerDir(diffID)
	if err != nil {
		return nil, err
	}
	return flock(d + ".lock")
}

// LockImage takes the lock of the image of manifest digest digest while
// it is brought in, so that a second pull of it at once waits for the
// first and then finds it in the store, fetching nothing. The lock's file
// is removed as it is dropped: a pull waiting on it then holds a file no
// longer there, and a pull after that makes another; both find the image
// in the store, or, if the first failed, bring it in at once, each layer
// still unpacked once.
func (s *Store) LockImage(digest string) (func(), error) {
	if !isDigest(digest) {
		return nil, fmt.Errorf("image store: %q is not a sha256 digest", digest)
	}
	p := filepath.Join(s.dir, "locks", strings.TrimPrefix(digest, "sha256:"))
	release, err := flock(p)
	if err != nil {
		return nil, err
	}
	return func() {
		_ = os.Remove(p)
		release()
	}, nil
}

// pruneImageLocks removes the locks of images that pulls killed left
// (LockImage removes its own), if no pull holds them.
func (s *Store) pruneImageLocks() {
	dir := filepath.Join(s.dir, "locks")
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		release, err := flockHow(filepath.Join(dir, e.Name()), unix.LOCK_EX|unix.LOCK_NB)
		if err != nil {
			continue // a pull brings it in now
		}
		_ = os.Remove(filepath.Join(dir, e.Name()))
		release()
	}
}

func flock(path string) (func(), error) {
	return flockHow(path, unix.LOCK_EX)
}

// flockHow takes the lock of path in mode how (LOCK_EX or LOCK_SH, with
// LOCK_NB not to wait: then unix.EWOULDBLOCK when it is held).
func flockHow(path string, how int) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		if err == unix.EWOULDBLOCK {
			return nil, err
		}
		return nil, fmt.Errorf("image store: lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// Use marks img used now (eviction takes the least recently used first)
// and holds its layers in use until the returned function is called: a
// sandbox stacks them, and prune or eviction removing one under it would
// pull files out of its view. It takes each layer's lock shared.
func (s *Store) Use(img *Image) (func(), error) {
	now := time.Now()
	_ = os.Chtimes(s.recordPath(img.Digest), now, now)
	var releases []func()
	release := func() {
		for _, r := range releases {
			r()
		}
	}
	for _, l := range img.Layers {
		d, err := s.LayerDir(l)
		if err != nil {
			release()
			return nil, err
		}
		r, err := flockHow(d+".lock", unix.LOCK_SH)
		if err != nil {
			release()
			return nil, err
		}
		releases = append(releases, r)
	}
	return release, nil
}

// Stack returns the directories of img's layers (bottom first), for a
// sandbox to stack as its root, and holds them in use (Use) until release
// is called. A layer missing from the store is an error: pull the image
// again.
func (s *Store) Stack(img *Image) (dirs []string, release func(), err error) {
	if release, err = s.Use(img); err != nil {
		return nil, nil, err
	}
	for _, l := range img.Layers {
		d, err := s.LayerDir(l)
		if err == nil && !s.HasLayer(l) {
			err = fmt.Errorf("image %s: layer %s is missing from the store: pull it again", img.Digest, l)
		}
		if err != nil {
			release()
			return nil, nil, err
		}
		dirs = append(dirs, d)
	}
	return dirs, release, nil
}

// tryLayer takes layer hex's lock if no sandbox uses the layer and no
// pull unpacks it; ok is false when one does.
func (s *Store) tryLayer(hex string) (release func(), ok bool) {
	r, err := flockHow(filepath.Join(s.dir, "layers", "sha256", hex+".lock"), unix.LOCK_EX|unix.LOCK_NB)
	if err != nil {
		return nil, false
	}
	return r, true
}

// RemoveTree removes dir and everything below it, also what a layer made
// read-only.
func RemoveTree(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("image store: %w", err)
	}
	return nil
}
