// Package imagetest builds OCI images for hutch's tests: layers from
// entries written as the test spells them (hostile ones too), images of
// such layers, and `docker save` tarballs of them.
package imagetest

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Entry is one entry of a layer's tar. Type is tar.TypeReg when zero; only
// a regular file has a Body.
type Entry struct {
	Name, Link, Body string
	Type             byte
	Mode             int64
	// PAX are PAX records (extended attributes, "SCHILY.xattr.NAME").
	PAX map[string]string
}

// File, Dir and Symlink are the usual entries.
func File(name, body string, mode int64) Entry { return Entry{Name: name, Body: body, Mode: mode} }
func Dir(name string) Entry                    { return Entry{Name: name, Type: tar.TypeDir, Mode: 0o755} }
func Symlink(name, target string) Entry {
	return Entry{Name: name, Link: target, Type: tar.TypeSymlink}
}

// Tar is the layer tar of entries, as given (no name is cleaned).
func Tar(t testing.TB, entries ...Entry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.Name, Linkname: e.Link, Typeflag: e.Type, Mode: e.Mode,
			Size: int64(len(e.Body)), ModTime: time.Unix(1_700_000_000, 0), PAXRecords: e.PAX}
		if len(e.PAX) > 0 {
			h.Format = tar.FormatPAX
		}
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
			if _, err := tw.Write([]byte(e.Body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Layer is a layer of the tar b.
func Layer(t testing.TB, b []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Image is an image of layers (bottom first) for linux/arch, its
// configuration changed by config when not nil.
func Image(t testing.TB, arch string, config func(*v1.Config), layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	if config != nil {
		config(&cf.Config)
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// DockerSave writes img as a `docker save` tarball tagged tag into dir and
// returns its path.
func DockerSave(t testing.TB, img v1.Image, tag, dir string) string {
	t.Helper()
	ref, err := name.NewTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(dir, "image-*.tar")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := tarball.WriteToFile(f.Name(), ref, img); err != nil {
		t.Fatal(err)
	}
	// Readable by the ordinary user a test may import it as.
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// Busybox is a two-layer image made from the host's busybox (skipped when
// /bin/busybox is missing, failed under HUTCH_TEST_ROOT=1 by the caller's
// gate): its applets as links, an /etc/passwd, and a second layer that
// deletes /gone, makes /opq opaque (hiding /opq/old) and adds /etc/motd.
// Its PATH is /bin, GREETING is set, and its command echoes "default
// command".
func Busybox(t testing.TB, need func(ok bool, reason string)) v1.Image {
	t.Helper()
	return BusyboxWith(t, need, nil)
}

// BusyboxWith is Busybox with config applied to its configuration after
// Busybox's own, and a third layer of extra on top, if any (an
// /etc/passwd with the image's users, say).
func BusyboxWith(t testing.TB, need func(ok bool, reason string), config func(*v1.Config), extra ...Entry) v1.Image {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		need(false, "needs /bin/busybox (busybox-static): "+err.Error())
		return nil
	}
	base := []Entry{Dir("bin/"), File("bin/busybox", string(bb), 0o755)}
	for _, a := range []string{"sh", "cat", "ls", "echo", "id", "pwd", "test", "mkdir", "touch", "rm"} {
		base = append(base, Symlink("bin/"+a, "busybox"))
	}
	for _, d := range []string{"etc/", "proc/", "sys/", "dev/", "tmp/", "root/", "opq/"} {
		base = append(base, Dir(d))
	}
	base = append(base, File("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n", 0o644), File("etc/group", "root:x:0:\n", 0o644),
		File("gone", "deleted by the layer above\n", 0o644), File("opq/old", "old\n", 0o644))
	top := []Entry{File(".wh.gone", "", 0), Dir("opq/"), File("opq/.wh..wh..opq", "", 0),
		File("opq/new", "new\n", 0o644), File("etc/motd", "from the image\n", 0o644)}
	layers := []v1.Layer{Layer(t, Tar(t, base...)), Layer(t, Tar(t, top...))}
	if len(extra) > 0 {
		layers = append(layers, Layer(t, Tar(t, extra...)))
	}
	return Image(t, "amd64", func(c *v1.Config) {
		c.Env = []string{"PATH=/bin", "GREETING=hi from the image"}
		c.Cmd = []string{"/bin/sh", "-c", "echo default command"}
		if config != nil {
			config(c)
		}
	}, layers...)
}

// TarEntry is an entry of a tar ReadTar read: its header and content.
type TarEntry struct {
	*tar.Header
	Body []byte
}

// ReadTar reads every entry of the tar r, in order.
func ReadTar(t testing.TB, r io.Reader) []TarEntry {
	t.Helper()
	var out []TarEntry
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, TarEntry{h, body})
	}
}

// TarHeaders are the headers of ReadTar's entries, by name.
func TarHeaders(entries []TarEntry) map[string]*tar.Header {
	m := make(map[string]*tar.Header, len(entries))
	for _, e := range entries {
		m[e.Name] = e.Header
	}
	return m
}
