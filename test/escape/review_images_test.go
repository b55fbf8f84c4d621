//go:build linux

package escape

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// layerEntry is one entry of a hostile layer.
type layerEntry struct {
	name, link string
	typ        byte
	mode       int64
	body       string
}

// imageTarOf writes a `docker save` tarball of an image of one layer made
// of entries, tagged hutch.test/hostile:NAME.
func imageTarOf(t *testing.T, dir, tag string, entries ...layerEntry) string {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body))}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	img = withPlatform(t, img)
	ref, err := name.NewTag("hutch.test/hostile:" + tag)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, tag+".tar")
	if err := tarball.WriteToFile(p, ref, img); err != nil {
		t.Fatal(err)
	}
	return p
}

func withPlatform(t *testing.T, img v1.Image) v1.Image {
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestImageLayersHostile: an image's layers come from whoever pushed it.
// Through `hutch image import`, as root and as an ordinary user: entries
// that would write outside the layer (dot-dot, absolute names, a symbolic
// link planted as a parent, hard links out, a whiteout through a link)
// refuse the image with an error naming the image, the layer and the
// entry, nothing outside changes and nothing of the image is kept;
// device nodes are never made, set-id bits never kept (both reported).
func TestImageLayersHostile(t *testing.T) {
	forEachMode(t, func(t *testing.T, sb *harness) {
		work := hostDir(t, sb.mode.uid, "images")
		state := filepath.Join(work, "state")
		victimDir := hostDir(t, sb.mode.uid, "victim")
		victim := filepath.Join(victimDir, "victim")
		writeFile(t, victim, "safe\n", 0o644, sb.mode.uid)
		up := strings.Repeat("../", 12)
		for _, c := range []struct {
			tag     string
			entries []layerEntry
		}{
			{"dotdot", []layerEntry{{name: up + strings.TrimPrefix(victim, "/"), body: "owned\n"}}},
			{"absolute", []layerEntry{{name: victim, body: "owned\n"}}},
			{"symlink-parent", []layerEntry{{name: "l", typ: tar.TypeSymlink, link: victimDir}, {name: "l/victim", body: "owned\n"}}},
			{"symlink-parent-rel", []layerEntry{{name: "d/", typ: tar.TypeDir, mode: 0o755}, {name: "d/l", typ: tar.TypeSymlink, link: up + strings.TrimPrefix(victimDir, "/")}, {name: "d/l/new", body: "owned\n"}}},
			{"hardlink-out", []layerEntry{{name: "h", typ: tar.TypeLink, link: up + strings.TrimPrefix(victim, "/")}}},
			{"whiteout-through-link", []layerEntry{{name: "l", typ: tar.TypeSymlink, link: victimDir}, {name: "l/.wh.victim"}}},
		} {
			p := imageTarOf(t, work, c.tag, c.entries...)
			r := sb.hutch(opts{noCheck: true}, "image", "import", p, "--state-dir", state)
			if r.code == 0 {
				t.Errorf("%s: imported:\n%s", c.tag, r)
			}
			if !strings.Contains(r.stderr, "image sha256:") || !strings.Contains(r.stderr, "layer sha256:") || !strings.Contains(r.stderr, "entry ") {
				t.Errorf("%s: the error does not name the image, the layer and the entry:\n%s", c.tag, r)
			}
			if b, err := os.ReadFile(victim); err != nil || string(b) != "safe\n" {
				t.Fatalf("%s: the file outside changed: %q, %v", c.tag, b, err)
			}
			if es, _ := os.ReadDir(victimDir); len(es) != 1 {
				t.Fatalf("%s: something was made outside: %v", c.tag, es)
			}
		}
		ls := sb.hutch(opts{}, "image", "ls", "--state-dir", state)
		if strings.Contains(ls.stdout, "hostile") {
			t.Errorf("a refused image was kept:\n%s", ls)
		}
		if es, _ := os.ReadDir(filepath.Join(state, "images", "layers", "sha256")); len(es) > 0 {
			for _, e := range es {
				if !strings.HasSuffix(e.Name(), ".lock") {
					t.Errorf("a refused layer was kept: %s", e.Name())
				}
			}
		}

		p := imageTarOf(t, work, "devices",
			layerEntry{name: "dev/sda", typ: tar.TypeBlock, mode: 0o666},
			layerEntry{name: "dev/mem", typ: tar.TypeChar, mode: 0o666},
			layerEntry{name: "bin/su", mode: 0o4755, body: "#!/bin/sh\n"},
			layerEntry{name: "bin/sg", mode: 0o2755, body: "#!/bin/sh\n"})
		r := sb.hutch(opts{}, "image", "import", p, "--state-dir", state)
		for _, want := range []string{"dev/sda: a device node", "dev/mem: a device node", "bin/su: set-id bits", "bin/sg: set-id bits"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("the import does not report %q:\n%s", want, r)
			}
		}
		layers, _ := filepath.Glob(filepath.Join(state, "images", "layers", "sha256", "*"))
		found := false
		for _, l := range layers {
			if strings.HasSuffix(l, ".lock") {
				continue
			}
			found = true
			if _, err := os.Lstat(filepath.Join(l, "dev", "sda")); !os.IsNotExist(err) {
				t.Errorf("a device node was made: %v", err)
			}
			for _, f := range []string{"bin/su", "bin/sg"} {
				if fi, err := os.Stat(filepath.Join(l, f)); err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
					t.Errorf("%s: %v %v", f, fi.Mode(), err)
				}
			}
		}
		if !found {
			t.Errorf("the image of devices and set-id files was not imported:\n%s", r)
		}
	})
}
