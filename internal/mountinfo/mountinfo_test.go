package mountinfo

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	in := "short line\n" +
		"1 2 0:1 / /a rw - cgroup\n" + // no super options
		"3 2 0:2 / /b rw,nosuid shared:1 master:2 - cgroup2 cgroup2 rw\n" +
		"70 26 254:0 /my\\040data /mnt/my\\040disk ro,relatime - ext4 /dev/vdb rw,discard\n"
	want := []Mount{
		{Dev: "0:2", Root: "/", Point: "/b", Options: []string{"rw", "nosuid"}, FSType: "cgroup2", Source: "cgroup2", SuperOptions: []string{"rw"}},
		{Dev: "254:0", Root: "/my data", Point: "/mnt/my disk", Options: []string{"ro", "relatime"}, FSType: "ext4", Source: "/dev/vdb", SuperOptions: []string{"rw", "discard"}},
	}
	got := Parse(in)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if got[0].ReadOnly() || !got[1].ReadOnly() {
		t.Errorf("ReadOnly: %v %v, want false true", got[0].ReadOnly(), got[1].ReadOnly())
	}
	path := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(path, []byte(in), 0o600); err != nil {
		t.Fatal(err)
	}
	if read, err := Read(path); err != nil || !reflect.DeepEqual(read, want) {
		t.Errorf("Read = %+v, %v", read, err)
	}
	if _, err := Read(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("Read of a missing file: no error")
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/plain`:           "/plain",
		`/a\040b`:          "/a b",
		`/tab\011nl\012`:   "/tab\tnl\n",
		`/back\134slash`:   `/back\slash`,
		`/not\x`:           `/not\x`,
		`/not\9escape`:     `/not\9escape`,
		`/short\04`:        `/short\04`,
		`/trailing\`:       `/trailing\`,
		`/two\040\040end`:  "/two  end",
		`/high\377byte`:    "/high\377byte",
		`/overflow\400oct`: `/overflow\400oct`,
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}
