package microvm

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// cpioEntry is an entry of a newc archive as the kernel reads it.
type cpioEntry struct {
	mode       uint32
	rmaj, rmin uint32
	data       []byte
}

// readNewc parses a newc archive strictly (magic, hexadecimal fields,
// 4-byte alignment of names and data, the trailer last).
func readNewc(t *testing.T, b []byte) map[string]cpioEntry {
	t.Helper()
	entries := map[string]cpioEntry{}
	off := 0
	align := func(n int) int { return (n + 3) &^ 3 }
	for {
		if off+110 > len(b) {
			t.Fatalf("archive ends at %d without a trailer", off)
		}
		h := b[off : off+110]
		if string(h[:6]) != "070701" {
			t.Fatalf("bad magic %q at %d", h[:6], off)
		}
		field := func(i int) uint32 {
			v, err := strconv.ParseUint(string(h[6+8*i:14+8*i]), 16, 32)
			if err != nil {
				t.Fatalf("field %d at %d: %v", i, off, err)
			}
			return uint32(v)
		}
		mode, size, rmaj, rmin, namesize := field(1), int(field(6)), field(9), field(10), int(field(11))
		name := string(b[off+110 : off+110+namesize-1])
		if b[off+110+namesize-1] != 0 {
			t.Fatalf("name %q at %d not NUL-terminated", name, off)
		}
		off = align(off + 110 + namesize)
		if name == "TRAILER!!!" {
			if rest := b[off:]; len(rest) != 0 {
				t.Fatalf("%d bytes after the trailer", len(rest))
			}
			return entries
		}
		if _, dup := entries[name]; dup {
			t.Fatalf("entry %q twice", name)
		}
		entries[name] = cpioEntry{mode: mode, rmaj: rmaj, rmin: rmin, data: b[off : off+size]}
		off = align(off + size)
	}
}

func TestWriteInitramfs(t *testing.T) {
	dir := writeKernelDir(t, goodKernelFiles())
	k, err := LoadKernel(dir)
	if err != nil {
		t.Fatal(err)
	}
	init, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	libs, err := sharedLibs(init)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteInitramfs(&buf, init, k); err != nil {
		t.Fatal(err)
	}
	entries := readNewc(t, buf.Bytes())
	self, _ := os.ReadFile(init)
	want := map[string]struct {
		mode uint32
		data []byte
	}{
		"dev":                    {cpioDir | 0o755, nil},
		"proc":                   {cpioDir | 0o755, nil},
		"sys":                    {cpioDir | 0o755, nil},
		"tmp":                    {cpioDir | 0o1777, nil},
		"modules":                {cpioDir | 0o755, nil},
		"dev/console":            {cpioChar | 0o600, nil},
		"init":                   {cpioReg | 0o755, self},
		"modules/virtio.ko":      {cpioReg | 0o644, []byte("virtio")},
		"modules/virtio_mmio.ko": {cpioReg | 0o644, []byte("virtio_mmio")},
		"modules/order":          {cpioReg | 0o644, []byte("virtio.ko\nvirtio_mmio.ko\n")},
	}
	// A test binary linked dynamically brings its loader and libraries,
	// and the directories above them.
	for _, lib := range libs {
		content, err := os.ReadFile(lib)
		if err != nil {
			t.Fatal(err)
		}
		want[lib[1:]] = struct {
			mode uint32
			data []byte
		}{cpioReg | 0o755, content}
		for d := filepath.Dir(lib); d != "/"; d = filepath.Dir(d) {
			want[d[1:]] = struct {
				mode uint32
				data []byte
			}{cpioDir | 0o755, nil}
		}
	}
	t.Logf("libraries: %v", libs)
	for name, w := range want {
		e, ok := entries[name]
		if !ok {
			t.Errorf("no %s in the initramfs", name)
			continue
		}
		if e.mode != w.mode {
			t.Errorf("%s: mode %o, want %o", name, e.mode, w.mode)
		}
		if !bytes.Equal(e.data, w.data) {
			t.Errorf("%s: content differs (%d bytes, want %d)", name, len(e.data), len(w.data))
		}
	}
	for name := range entries {
		if _, ok := want[name]; !ok {
			t.Errorf("unexpected %s in the initramfs", name)
		}
	}
	if c := entries["dev/console"]; c.rmaj != 5 || c.rmin != 1 {
		t.Errorf("dev/console is device %d:%d, want 5:1", c.rmaj, c.rmin)
	}
}

func TestWriteInitramfsNotELF(t *testing.T) {
	dir := writeKernelDir(t, goodKernelFiles())
	k, err := LoadKernel(dir)
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "init")
	write(t, script, "#!/bin/sh\n")
	var buf bytes.Buffer
	if err := WriteInitramfs(&buf, script, k); err == nil {
		t.Error("an init that is no ELF binary was taken")
	}
}
