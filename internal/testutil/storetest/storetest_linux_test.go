package storetest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestImport: two stores get one tarball's image, named as the tarball
// names it, from one shared import: a layer's file is one inode in both
// and the shared store, the records are each store's own.
func TestImport(t *testing.T) {
	testutil.RequireRoot(t)
	img := imagetest.Image(t, "amd64", nil, imagetest.Layer(t, imagetest.Tar(t, imagetest.File("hello", "hi\n", 0o644))))
	tarball := imagetest.DockerSave(t, img, "storetest/hello:1", t.TempDir())
	var inodes []uint64
	for i := range 2 {
		st, err := image.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		Import(t, tarball, st)
		got, err := st.Get("storetest/hello:1")
		if err != nil {
			t.Fatal(err)
		}
		d, err := st.LayerDir(got.Layers[0])
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(filepath.Join(d, "hello"))
		if err != nil {
			t.Fatal(err)
		}
		inodes = append(inodes, fi.Sys().(*syscall.Stat_t).Ino)
		if n := fi.Sys().(*syscall.Stat_t).Nlink; n < uint64(i)+2 {
			t.Errorf("the layer's file has %d links, want the shared store's and %d store's", n, i+1)
		}
		rec, err := os.Stat(filepath.Join(st.Dir(), "refs.json"))
		if err != nil || rec.Sys().(*syscall.Stat_t).Nlink != 1 {
			t.Errorf("refs.json is not the store's own: %v", err)
		}
	}
	if inodes[0] != inodes[1] {
		t.Errorf("the layer's file is inodes %d and %d, want one", inodes[0], inodes[1])
	}
}
