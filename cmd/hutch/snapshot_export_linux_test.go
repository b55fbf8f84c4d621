package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// viewScript lists a sandbox's root as the test compares it: every path
// (one file system: not /proc, /dev …), its type and mode, owner, and for
// all but directories its size, links, modification time and target, then
// every regular file's MD5.
const viewScript = `b=/bin/busybox
$b find / -xdev | $b sort | while read p; do
  if [ -d "$p" ] && [ ! -L "$p" ]; then $b stat -c '%n|%f|%u:%g' "$p"; else $b stat -c '%n|%f|%u:%g|%s|%h|%Y|%N' "$p"; fi
done
$b find / -xdev -type f | $b sort | $b xargs $b md5sum`

// changeScript writes, in a sandbox of the test's image, one of every
// kind of change.
const changeScript = `set -e; b=/bin/busybox
echo added > /added
echo edited > /etc/motd
$b rm /etc/group
$b rm -r /data
$b rm -r /keep; $b mkdir /keep; echo y > /keep/y
$b ln -s /etc/motd /link
echo linked > /h1; $b ln /h1 /h2
echo run > /suid; $b chmod 4755 /suid
$b mkdir -m 0751 /private; echo s > /private/secret; $b chmod 0640 /private/secret; $b chown 1000:1001 /private/secret
$b touch -d '2020-01-02 03:04:05' /added`

// TestSnapshotExport: a snapshot of a sandbox of an image, exported with
// hutch snapshot export and imported back with hutch image import, and
// pushed with hutch snapshot push to a registry on loopback and pulled
// back, starts sandboxes that see exactly what the source saw: added,
// edited and deleted files, a deleted directory, an opaque one, a
// symbolic link, a hard link, modes and owners (set-id bits excepted:
// every import strips them, the export keeps them). Two exports are the
// same bytes, and the push has the export's digest. A snapshot over the
// host's root is refused, saying why; another tenant finds no snapshot.
func TestSnapshotExport(t *testing.T) {
	img := imagetest.BusyboxWith(t, func(ok bool, reason string) { testutil.Need(t, ok, reason) }, nil,
		imagetest.Dir("data/"), imagetest.File("data/a", "a\n", 0o644), imagetest.Dir("data/sub/"), imagetest.File("data/sub/b", "b\n", 0o600),
		imagetest.Dir("keep/"), imagetest.File("keep/x", "x\n", 0o644))
	d := startDaemonWith(t, importImage(t, img, "hutch.test/base:1"))
	view := func(id string) string {
		t.Helper()
		r := d.admin(t, "exec", id, "--", "/bin/sh", "-c", viewScript)
		wantOK(t, r)
		return r.stdout
	}
	create := func(ref string) string {
		t.Helper()
		r := d.admin(t, "create", "--image", ref)
		wantOK(t, r)
		return lastLine(r.stdout)
	}

	src := create("hutch.test/base:1")
	wantOK(t, d.admin(t, "exec", src, "--", "/bin/sh", "-c", changeScript))
	want := view(src)
	for _, s := range []string{"/added|", "/h2|", "/link|", "/keep/y|", "/private/secret|81a0|1000:1001|"} {
		if !strings.Contains(want, "\n"+s) {
			t.Fatalf("the source's view lacks %q:\n%s", s, want)
		}
	}
	// Every import strips set-id bits: the source's /suid is 4755, an
	// imported image's 0755 (mode 81ed).
	wantImported := strings.Replace(want, "\n/suid|89ed|", "\n/suid|81ed|", 1)
	if wantImported == want {
		t.Fatalf("the source's /suid is not set-uid:\n%s", want)
	}
	r := d.admin(t, "snapshot", src)
	wantOK(t, r)
	sid := lastLine(r.stdout)

	// Export, twice: the same bytes; the digest on stdout.
	dir := hostDir(t)
	file := filepath.Join(dir, "tpl.tar")
	r = d.admin(t, "snapshot", "export", sid, "-o", file, "--name", "hutch.test/exported:1")
	wantOK(t, r)
	digest := lastLine(r.stdout)
	if !strings.HasPrefix(digest, "sha256:") {
		t.Fatalf("snapshot export printed %q", r.stdout)
	}
	r = d.admin(t, "snapshot", "export", "--name", "hutch.test/exported:1", "-o", filepath.Join(dir, "again.tar"), sid)
	wantOK(t, r)
	a, _ := os.ReadFile(file)
	b, _ := os.ReadFile(filepath.Join(dir, "again.tar"))
	if len(a) == 0 || !bytes.Equal(a, b) || lastLine(r.stdout) != digest {
		t.Errorf("two exports differ (%d and %d bytes, digests %s and %s)", len(a), len(b), digest, lastLine(r.stdout))
	}
	checkExportedLayer(t, a)

	// Imported back into the daemon's store, a sandbox of it sees what
	// the source saw.
	r = d.admin(t, "image", "import", file, "--state-dir", d.stateDir)
	wantOK(t, r)
	if !strings.Contains(r.stdout, digest) || !strings.Contains(r.stdout, "hutch.test/exported:1") {
		t.Errorf("image import of the export: %s", r)
	}
	if got := view(create("hutch.test/exported:1")); got != wantImported {
		t.Errorf("a sandbox of the exported image sees otherwise than the source:\n%s", diffLines(wantImported, got))
	}

	// Pushed from the client's side to a registry, pulled back.
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	ref := host + "/team/tpl:1"
	r = d.admin(t, "snapshot", "push", sid, ref)
	if r.code != 1 || !strings.Contains(r.stderr, "--insecure-registry") {
		t.Errorf("a push over plain HTTP not named:\n%s", r)
	}
	r = d.admin(t, "snapshot", "push", "--insecure-registry", host, sid, ref)
	wantOK(t, r)
	if lastLine(r.stdout) != ref+"@"+digest {
		t.Errorf("snapshot push printed %q, want %s@%s", r.stdout, ref, digest)
	}
	r = d.admin(t, "image", "pull", "--remote", "--insecure-registry", host, ref)
	wantOK(t, r)
	if lastLine(r.stdout) != digest {
		t.Errorf("the pull of the pushed image is %q, want %s", r.stdout, digest)
	}
	if got := view(create(ref)); got != wantImported {
		t.Errorf("a sandbox of the pushed image sees otherwise than the source:\n%s", diffLines(wantImported, got))
	}

	// docker save's form: docker load's (and hutch image import's).
	dfile := filepath.Join(dir, "docker.tar")
	wantOK(t, d.admin(t, "snapshot", "export", "--format", "docker", "--name", "hutch.test/docker:1", "-o", dfile, sid))
	r = d.admin(t, "image", "import", dfile, "--state-dir", d.stateDir)
	if wantOK(t, r); !strings.Contains(r.stdout, "hutch.test/docker:1") {
		t.Errorf("image import of the docker export: %s", r)
	}

	// Over the host's root: refused, saying why, and no file left.
	host1 := d.admin(t, "create")
	wantOK(t, host1)
	r = d.admin(t, "snapshot", lastLine(host1.stdout))
	wantOK(t, r)
	r = d.admin(t, "snapshot", "export", lastLine(r.stdout), "-o", filepath.Join(dir, "host.tar"))
	if r.code != 1 || !strings.Contains(r.stderr, "host's root") || !strings.Contains(r.stderr, "not a whole image") {
		t.Errorf("the export of a snapshot over the host's root:\n%s", r)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 3 {
		t.Errorf("a refused export left files: %v", ents)
	}

	// Another tenant finds no snapshot to export or push.
	tok := d.token(t, "other", false)
	r = d.as(t, d.tcp, tok, nil, "snapshot", "export", sid, "-o", filepath.Join(dir, "other.tar"))
	if r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("another tenant's export:\n%s", r)
	}
	r = d.as(t, d.tcp, tok, nil, "snapshot", "push", "--insecure-registry", host, sid, host+"/other/tpl:1")
	if r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("another tenant's push:\n%s", r)
	}
}

// checkExportedLayer checks the snapshot's layer (the last) of the OCI
// layout tar b: OCI's whiteouts, an opaque directory, a hard link, the
// set-uid bit and the owner as the sandbox made them.
func checkExportedLayer(t *testing.T, b []byte) {
	t.Helper()
	blobs := map[string][]byte{}
	for _, e := range imagetest.ReadTar(t, bytes.NewReader(b)) {
		blobs[e.Name] = e.Body
	}
	var index struct {
		Manifests []struct{ Digest string }
	}
	var manifest struct {
		Layers []struct{ Digest string }
	}
	if err := json.Unmarshal(blobs["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, blobs["index.json"])
	}
	if err := json.Unmarshal(blobs["blobs/sha256/"+strings.TrimPrefix(index.Manifests[0].Digest, "sha256:")], &manifest); err != nil || len(manifest.Layers) != 4 {
		t.Fatalf("the manifest: %v %+v", err, manifest)
	}
	top := blobs["blobs/sha256/"+strings.TrimPrefix(manifest.Layers[3].Digest, "sha256:")]
	got := imagetest.TarHeaders(imagetest.ReadTar(t, bytes.NewReader(top)))
	for name, ok := range map[string]func(h *tar.Header) bool{
		".wh.data":          func(h *tar.Header) bool { return h.Typeflag == tar.TypeReg && h.Size == 0 },
		"etc/.wh.group":     func(h *tar.Header) bool { return h.Typeflag == tar.TypeReg },
		"keep/.wh..wh..opq": func(h *tar.Header) bool { return h.Typeflag == tar.TypeReg },
		"h2":                func(h *tar.Header) bool { return h.Typeflag == tar.TypeLink && h.Linkname == "h1" },
		"suid":              func(h *tar.Header) bool { return h.Mode == 0o4755 },
		"private/secret":    func(h *tar.Header) bool { return h.Mode == 0o640 && h.Uid == 1000 && h.Gid == 1001 },
		"link":              func(h *tar.Header) bool { return h.Typeflag == tar.TypeSymlink && h.Linkname == "/etc/motd" },
		"private/":          func(h *tar.Header) bool { return h.Typeflag == tar.TypeDir && h.Mode == 0o751 },
		"added": func(h *tar.Header) bool {
			return h.ModTime.UTC().Format("2006-01-02 15:04:05") == "2020-01-02 03:04:05"
		},
		"keep/y":               func(h *tar.Header) bool { return h.Size == 2 },
		"etc/motd":             func(h *tar.Header) bool { return h.Size == 7 },
		"keep/.wh.x":           nil, // hidden by the opaque directory, not deleted one by one
		"data/.wh..wh..opq":    nil,
		"etc/.wh..wh..opq":     nil,
		"etc/group":            nil,
		"data/a":               nil,
		"private/.wh..wh..opq": nil,
	} {
		h := got[name]
		if ok == nil {
			if h != nil {
				t.Errorf("the snapshot's layer has %s: %+v", name, h)
			}
			continue
		}
		if h == nil || !ok(h) {
			t.Errorf("the snapshot's layer's %s: %+v", name, h)
		}
	}
}

// diffLines shows the lines of want and got that differ.
func diffLines(want, got string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var out []string
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			out = append(out, "- "+l)
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}
