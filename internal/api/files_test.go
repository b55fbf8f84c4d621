package api

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestFiles(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, OriginLocal)
	ws := e.create(t, nil).Workspace
	sb := "/v1/sandboxes/" + e.m.LastCreateID()
	f := ws + "/notes.txt"

	resp, data := e.request(t, "PUT", sb+"/files?path="+f+"&mode=0640", "first version")
	want(t, resp, data, 200, "")
	var wr WriteResult
	if err := json.Unmarshal(data, &wr); err != nil || wr.Size != 13 || wr.Path != f {
		t.Errorf("write result %s", data)
	}
	resp, data = e.request(t, "PUT", sb+"/files?path="+f, "second")
	want(t, resp, data, 200, "")
	resp, data = e.request(t, "GET", sb+"/files?path="+f, nil)
	want(t, resp, data, 200, "")
	if string(data) != "second" || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("read %q (%s)", data, resp.Header.Get("Content-Type"))
	}
	resp, data = e.request(t, "GET", sb+"/files/stat?path="+f, nil)
	want(t, resp, data, 200, "")
	var fi FileInfo
	if err := json.Unmarshal(data, &fi); err != nil {
		t.Fatal(err)
	}
	if fi.Name != "notes.txt" || fi.Type != "file" || fi.Size != 6 || fi.Mode != 0o640 {
		t.Errorf("stat %+v (the mode of the file replaced is kept)", fi)
	}

	// An empty file reads as an empty 200.
	resp, data = e.request(t, "PUT", sb+"/files?path="+ws+"/empty", "")
	want(t, resp, data, 200, "")
	resp, data = e.request(t, "GET", sb+"/files?path="+ws+"/empty", nil)
	want(t, resp, data, 200, "")
	if len(data) != 0 {
		t.Errorf("empty file read as %q", data)
	}

	resp, data = e.request(t, "POST", sb+"/files/mkdir", `{"path":"`+ws+`/a/b/c","parents":true}`)
	want(t, resp, data, 204, "")
	resp, data = e.request(t, "POST", sb+"/files/mkdir", `{"path":"`+ws+`/a"}`)
	want(t, resp, data, 409, CodeConflict)
	resp, data = e.request(t, "POST", sb+"/files/rename", `{"from":"`+f+`","to":"`+ws+`/a/moved.txt"}`)
	want(t, resp, data, 204, "")
	if err := os.Symlink("/etc/passwd", filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	resp, data = e.request(t, "GET", sb+"/files/list?path="+ws, nil)
	want(t, resp, data, 200, "")
	var list []FileInfo
	if err := json.Unmarshal(data, &list); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, fi := range list {
		names = append(names, fi.Name+":"+fi.Type+":"+fi.Link)
	}
	if !slices.Equal(names, []string{"a:dir:", "empty:file:", "link:symlink:/etc/passwd"}) {
		t.Errorf("list: %v", names)
	}

	resp, data = e.request(t, "GET", sb+"/files?path="+ws+"/a", nil)
	want(t, resp, data, 400, CodeInvalid)
	resp, data = e.request(t, "GET", sb+"/files?path="+ws+"/missing", nil)
	want(t, resp, data, 404, CodeNotFound, "missing")
	resp, data = e.request(t, "DELETE", sb+"/files?path="+ws+"/a", nil)
	want(t, resp, data, 409, CodeConflict)
	resp, data = e.request(t, "DELETE", sb+"/files?path="+ws+"/a&recursive=true", nil)
	want(t, resp, data, 204, "")
	resp, data = e.request(t, "GET", sb+"/files/stat?path="+ws+"/a", nil)
	want(t, resp, data, 404, CodeNotFound)
	resp, data = e.request(t, "PUT", sb+"/files?path="+ws+"/no/such/dir/f", "x")
	want(t, resp, data, 404, CodeNotFound)
}

// tarEntry is one entry of a test archive.
type tarEntry struct {
	name, body, link string
	typ              byte
	mode             int64
}

func makeTar(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode, Size: int64(len(e.body))}
		if hdr.Typeflag == 0 {
			hdr.Typeflag = tar.TypeReg
		}
		if hdr.Mode == 0 {
			hdr.Mode = 0o644
		}
		if hdr.Typeflag != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Size > 0 {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// readTar returns "name type [link|content]" for every entry.
func readTar(t *testing.T, data []byte) []string {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(data))
	var out []string
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		switch hdr.Typeflag {
		case tar.TypeDir:
			out = append(out, hdr.Name+" dir")
		case tar.TypeSymlink:
			out = append(out, hdr.Name+" -> "+hdr.Linkname)
		default:
			out = append(out, hdr.Name+" "+string(b))
		}
	}
}

func TestArchive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, OriginLocal)
	ws := e.create(t, nil).Workspace
	sb := "/v1/sandboxes/" + e.m.LastCreateID()

	archive := makeTar(t,
		tarEntry{name: "./", typ: tar.TypeDir, mode: 0o755},
		tarEntry{name: "top.txt", body: "top"},
		tarEntry{name: "src/", typ: tar.TypeDir, mode: 0o755},
		tarEntry{name: "src/main.go", body: "package main", mode: 0o600},
		tarEntry{name: "deep/er/file", body: "no directory entries before it"},
		tarEntry{name: "src/up", typ: tar.TypeSymlink, link: "../top.txt"},
		tarEntry{name: "same", typ: tar.TypeSymlink, link: "src/main.go"},
		tarEntry{name: "hard", typ: tar.TypeLink, link: "top.txt"},
		tarEntry{name: "run.sh", body: "#!/bin/sh\n", mode: 0o755},
	)
	resp, data := e.request(t, "PUT", sb+"/archive?path="+ws+"/proj", bytes.NewReader(archive))
	want(t, resp, data, 200, "")
	var ar ArchiveResult
	if err := json.Unmarshal(data, &ar); err != nil || ar.Entries != 9 {
		t.Errorf("archive result %s", data)
	}
	proj := filepath.Join(ws, "proj")
	for name, content := range map[string]string{"top.txt": "top", "src/main.go": "package main", "deep/er/file": "no directory entries before it", "src/up": "top", "same": "package main", "hard": "top"} {
		if b, err := os.ReadFile(filepath.Join(proj, name)); err != nil || string(b) != content {
			t.Errorf("%s: %q, %v", name, b, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(proj, "run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("run.sh: %v, %v", fi, err)
	}
	if l, err := os.Readlink(filepath.Join(proj, "src/up")); err != nil || l != "../top.txt" {
		t.Errorf("src/up -> %q, %v", l, err)
	}

	resp, data = e.request(t, "GET", sb+"/archive?path="+proj, nil)
	want(t, resp, data, 200, "")
	got := readTar(t, data)
	wantEntries := []string{"deep/ dir", "deep/er/ dir", "deep/er/file no directory entries before it", "hard top", "run.sh #!/bin/sh\n",
		"same -> src/main.go", "src/ dir", "src/main.go package main", "src/up -> ../top.txt", "top.txt top"}
	if !slices.Equal(got, wantEntries) {
		t.Errorf("downloaded:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantEntries, "\n"))
	}
	resp, data = e.request(t, "GET", sb+"/archive?path="+proj+"/top.txt", nil)
	want(t, resp, data, 400, CodeInvalid, "not a directory")
	resp, data = e.request(t, "GET", sb+"/archive?path="+proj+"/nothing", nil)
	want(t, resp, data, 404, CodeNotFound)
}

// TestArchiveTraversal checks that an upload refuses every entry that
// would land outside its directory, and writes nothing there.
func TestArchiveTraversal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{}, OriginLocal)
	ws := e.create(t, nil).Workspace
	sb := "/v1/sandboxes/" + e.m.LastCreateID()
	target := filepath.Join(ws, "in", "dir")
	outside := filepath.Join(ws, "in")
	tests := []struct {
		name    string
		entries []tarEntry
		msg     string
	}{
		{"dot-dot", []tarEntry{{name: "ok", body: "x"}, {name: "../escaped", body: "x"}}, `".."`},
		{"dot-dot inside", []tarEntry{{name: "a/../../escaped", body: "x"}}, `".."`},
		{"absolute", []tarEntry{{name: "/tmp/escaped", body: "x"}}, "absolute"},
		{"absolute symlink", []tarEntry{{name: "l", typ: tar.TypeSymlink, link: "/etc"}}, "outside"},
		{"climbing symlink", []tarEntry{{name: "a/l", typ: tar.TypeSymlink, link: "../../escaped"}}, "outside"},
		{"symlink then through it", []tarEntry{{name: "l", typ: tar.TypeSymlink, link: "."}, {name: "l/escaped", body: "x"}}, "passes through the symlink"},
		{"chained symlinks", []tarEntry{{name: "a/b", typ: tar.TypeSymlink, link: ".."}, {name: "c", typ: tar.TypeSymlink, link: "a/b/.."}}, "may only lead"},
		{"hard link out", []tarEntry{{name: "h", typ: tar.TypeLink, link: "../escaped"}}, "outside"},
		{"hard link through a symlink", []tarEntry{{name: "l", typ: tar.TypeSymlink, link: "."}, {name: "h", typ: tar.TypeLink, link: "l/x"}}, "through the symlink"},
		{"device", []tarEntry{{name: "null", typ: tar.TypeChar}}, "not supported"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, data := e.request(t, "PUT", sb+"/archive?path="+target, bytes.NewReader(makeTar(t, tc.entries...)))
			want(t, resp, data, 400, CodeInvalid, tc.msg)
			for _, p := range []string{filepath.Join(outside, "escaped"), filepath.Join(ws, "escaped"), "/tmp/escaped"} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s was written", p)
				}
			}
		})
	}
	resp, data := e.request(t, "PUT", sb+"/archive?path="+target, "this is not a tar stream, not at all; it goes on for a while to fill a header block"+strings.Repeat(".", 600))
	want(t, resp, data, 400, CodeInvalid, "archive")
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatal()
	}
}
