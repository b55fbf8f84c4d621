package image

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

const (
	testPasswd = "root:x:0:0:root:/root:/bin/sh\n# a comment\napp:x:1000:1000:App:/home/app:/bin/sh\nnohome:x:1001:1001:::/bin/sh\n"
	testGroup  = "root:x:0:\napp:x:1000:\nstaff:x:50:app,other\nwheel:x:10:app\nother:x:60:nobody\n"
)

// TestResolveUser: the forms Docker takes for an image's user.
func TestResolveUser(t *testing.T) {
	files := map[string]string{"etc/passwd": testPasswd, "etc/group": testGroup}
	read := func(name string) ([]byte, error) {
		if s, ok := files[name]; ok {
			return []byte(s), nil
		}
		return nil, os.ErrNotExist
	}
	for _, tt := range []struct {
		spec string
		want User
		err  string
	}{
		{"", User{Name: "root", UID: 0, GID: 0, Home: "/root"}, ""},
		{"app", User{Name: "app", UID: 1000, GID: 1000, Groups: []int{50, 10}, Home: "/home/app"}, ""},
		{"1000", User{Name: "app", UID: 1000, GID: 1000, Groups: []int{50, 10}, Home: "/home/app"}, ""},
		{"app:staff", User{Name: "app", UID: 1000, GID: 50, Home: "/home/app"}, ""},
		{"app:77", User{Name: "app", UID: 1000, GID: 77, Home: "/home/app"}, ""},
		{"4242", User{UID: 4242, GID: 0, Home: "/"}, ""},
		{"4242:4343", User{UID: 4242, GID: 4343, Home: "/"}, ""},
		{"nohome", User{Name: "nohome", UID: 1001, GID: 1001, Home: "/"}, ""},
		{"ghost", User{}, `user "ghost": no such user in the image's /etc/passwd`},
		{"app:ghosts", User{}, `user "app:ghosts": no such group "ghosts" in the image's /etc/group`},
		{":staff", User{}, `no user before the colon`},
	} {
		got, err := ResolveUser(tt.spec, read)
		switch {
		case tt.err != "":
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%q: error %v, want %q", tt.spec, err, tt.err)
			}
		case err != nil:
			t.Errorf("%q: %v", tt.spec, err)
		case !reflect.DeepEqual(got, tt.want):
			t.Errorf("%q: %+v, want %+v", tt.spec, got, tt.want)
		}
	}
	files = map[string]string{}
	if u, err := ResolveUser("", read); err != nil || u.UID != 0 || u.Home != "/" {
		t.Errorf("root of an image without passwd: %+v, %v", u, err)
	}
}

// TestReadMerged: a file as the stacked layers show it — the top layer's,
// none past a whiteout or an opaque directory, none through a symbolic
// link.
func TestReadMerged(t *testing.T) {
	dir := t.TempDir()
	layer := func(name string, files map[string]string) string {
		d := filepath.Join(dir, name)
		for p, body := range files {
			full := filepath.Join(d, p)
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			switch body {
			case "<whiteout>":
				if err := unix.Mknod(full, unix.S_IFCHR, 0); err != nil {
					t.Fatal(err)
				}
			case "<opaque>":
				if err := os.Mkdir(full, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := unix.Setxattr(full, "user.overlay.opaque", []byte("y"), 0); err != nil {
					t.Skipf("user extended attributes in %s: %v", dir, err)
				}
			case "<link>":
				if err := os.Symlink("/etc/passwd", full); err != nil {
					t.Fatal(err)
				}
			default:
				if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		return d
	}
	base := layer("base", map[string]string{"etc/passwd": "base\n", "etc/group": "base\n", "etc/shadow": "base\n", "opt/x/f": "base\n"})
	mid := layer("mid", map[string]string{"etc/passwd": "mid\n", "etc/group": "<whiteout>", "opt/x": "<opaque>"})
	top := layer("top", map[string]string{"etc/hosts": "top\n", "etc/link": "<link>"})
	dirs := []string{base, mid, top}
	for name, want := range map[string]string{"etc/passwd": "mid\n", "etc/shadow": "base\n", "etc/hosts": "top\n"} {
		if b, err := ReadMerged(dirs, name); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", name, b, err, want)
		}
	}
	for _, name := range []string{"etc/group", "opt/x/f", "etc/none"} {
		if b, err := ReadMerged(dirs, name); !os.IsNotExist(err) {
			t.Errorf("%s: %q, %v; want none", name, b, err)
		}
	}
	if _, err := ReadMerged(dirs, "etc/link"); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("a symbolic link: %v", err)
	}
}
