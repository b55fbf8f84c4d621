package main

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestExtractTarModes: what hutch cp extracts from a sandbox's archive
// grants nothing on the host: set-id and sticky bits are dropped, the
// local umask applies, and nothing is writable by others (by the group
// only when the umask allows it); directories stay the user's to enter
// and write.
func TestExtractTarModes(t *testing.T) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range []struct {
		name string
		mode int64
		dir  bool
	}{
		{"d/", 0o777, true},
		{"d/suid", 0o4777, false},
		{"d/sgid", 0o2755, false},
		{"d/plain", 0o666, false},
		{"d/private", 0o600, false},
		{"sticky/", 0o1777, true},
		{"closed/", 0o500, true},
	} {
		hdr := &tar.Header{Name: e.name, Mode: e.mode, Typeflag: tar.TypeReg, Size: 1}
		if e.dir {
			hdr.Typeflag, hdr.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if !e.dir {
			if _, err := tw.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		umask fs.FileMode
		want  map[string]fs.FileMode
	}{
		{0o022, map[string]fs.FileMode{"d": 0o755, "d/suid": 0o755, "d/sgid": 0o755, "d/plain": 0o644, "d/private": 0o600, "sticky": 0o755, "closed": 0o700}},
		{0o002, map[string]fs.FileMode{"d": 0o775, "d/suid": 0o775, "d/sgid": 0o755, "d/plain": 0o664, "d/private": 0o600, "sticky": 0o775, "closed": 0o700}},
		{0o000, map[string]fs.FileMode{"d": 0o775, "d/suid": 0o775, "d/sgid": 0o755, "d/plain": 0o664, "d/private": 0o600, "sticky": 0o775, "closed": 0o700}},
		{0o077, map[string]fs.FileMode{"d": 0o700, "d/suid": 0o700, "d/sgid": 0o700, "d/plain": 0o600, "d/private": 0o600, "sticky": 0o700, "closed": 0o700}},
	} {
		dir := t.TempDir()
		if err := extractTar(bytes.NewReader(b.Bytes()), dir, tt.umask); err != nil {
			t.Fatalf("umask %#o: %v", tt.umask, err)
		}
		for name, want := range tt.want {
			fi, err := os.Lstat(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode() &^ fs.ModeType; got != want {
				t.Errorf("umask %#o: %s has mode %v, want %v", tt.umask, name, got, want)
			}
		}
	}
}
