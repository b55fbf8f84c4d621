package image

import (
	"fmt"
	"os"
	"path/filepath"

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

func flock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("image store: lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
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
