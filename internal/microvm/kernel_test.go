package microvm

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeKernelDir makes a kernel directory of the cache's layout with
// fake contents, its manifest made by mutate's caller.
func writeKernelDir(t *testing.T, files map[string]string) string {
	t.Helper()
	cache := t.TempDir()
	dir := filepath.Join(cache, "6.1.0-99-cloud-amd64")
	var manifest strings.Builder
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(content))
		manifest.WriteString(hex.EncodeToString(sum[:]) + "  " + name + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestName), []byte(manifest.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Base(dir), filepath.Join(cache, "current")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func goodKernelFiles() map[string]string {
	return map[string]string{
		"vmlinuz":                "kernel image",
		"config":                 "CONFIG_VIRTIO_MMIO=m\n",
		"builtin":                "",
		"modules.order":          "modules/virtio.ko\nmodules/virtio_mmio.ko\n",
		"modules/virtio.ko":      "virtio",
		"modules/virtio_mmio.ko": "virtio_mmio",
	}
}

func TestFindKernel(t *testing.T) {
	dir := writeKernelDir(t, goodKernelFiles())
	k, err := FindKernel(filepath.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	if k.Release != "6.1.0-99-cloud-amd64" || k.Image != filepath.Join(dir, "vmlinuz") {
		t.Errorf("kernel %+v", k)
	}
	want := []string{filepath.Join(dir, "modules/virtio.ko"), filepath.Join(dir, "modules/virtio_mmio.ko")}
	if strings.Join(k.Modules, ",") != strings.Join(want, ",") {
		t.Errorf("modules %v, want %v (the load order)", k.Modules, want)
	}
}

// TestKernelImage: a directory with vmlinux, an ELF kernel with a PVH
// entry, boots it, while a saved guest's restore gets the image it was
// saved with (vmlinuz when the save named none), checked then; an image
// the directory lacks is refused.
func TestKernelImage(t *testing.T) {
	files := goodKernelFiles()
	files["vmlinux"] = elfKernel(xenPhys32Entry)
	dir := writeKernelDir(t, files)
	k, err := LoadKernel(dir)
	if err != nil {
		t.Fatal(err)
	}
	if k.Image != filepath.Join(dir, "vmlinux") || k.Packaged != filepath.Join(dir, "vmlinuz") {
		t.Fatalf("image %s, packaged %s", k.Image, k.Packaged)
	}
	for name, want := range map[string]string{"": "vmlinuz", "vmlinuz": "vmlinuz", "vmlinux": "vmlinux"} {
		r, err := k.imageNamed(name)
		if err != nil || r.Image != filepath.Join(dir, want) {
			t.Errorf("image named %q: %v, %v; want %s", name, r, err, want)
		}
	}
	if _, err := k.imageNamed("bzImage"); err == nil {
		t.Error("an image the directory lacks was accepted")
	}
	if k.Image != filepath.Join(dir, "vmlinux") {
		t.Error("imageNamed changed the kernel it was called on")
	}
	// vmlinuz, not booted, is checked when a restore asks for it.
	write(t, filepath.Join(dir, "vmlinuz"), "other kernel")
	if _, err := LoadKernel(dir); err != nil {
		t.Fatalf("a kernel that boots vmlinux, its vmlinuz altered: %v", err)
	}
	if _, err := k.imageNamed(""); !errors.Is(err, ErrNoKernel) || !strings.Contains(err.Error(), filepath.Join(dir, "vmlinuz")+":") {
		t.Errorf("the restore of a guest that booted the altered vmlinuz: %v, want ErrNoKernel naming it", err)
	}
}

// TestCheckKernelImage: hutch run --check names the image a kernel
// directory boots, and tells how to add vmlinux to one without it.
func TestCheckKernelImage(t *testing.T) {
	files := goodKernelFiles()
	line := func(dir string) string {
		lines, _ := Check(dir, true)
		for _, l := range lines {
			if strings.Contains(l, "guest kernel: ") {
				return l
			}
		}
		t.Fatalf("no guest kernel line in %q", lines)
		return ""
	}
	if l := line(writeKernelDir(t, files)); !strings.HasPrefix(l, "ok  ") || !strings.Contains(l, "run scripts/guest-kernel.sh again to add vmlinux") {
		t.Errorf("a directory without vmlinux: %q", l)
	}
	files["vmlinux"] = elfKernel(xenPhys32Entry)
	if l := line(writeKernelDir(t, files)); !strings.Contains(l, "boots vmlinux, uncompressed") {
		t.Errorf("a directory with vmlinux: %q", l)
	}
}

// elfKernel is a minimal x86-64 ELF file with one note segment holding a
// Xen note of type typ (none when 0).
func elfKernel(typ uint32) string {
	le := binary.LittleEndian
	var note []byte
	if typ != 0 {
		note = le.AppendUint32(note, 4)
		note = le.AppendUint32(note, 4)
		note = le.AppendUint32(note, typ)
		note = append(note, "Xen\x00"...)
		note = le.AppendUint32(note, 0x1000000)
	}
	b := []byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	b = le.AppendUint16(b, 2)  // ET_EXEC
	b = le.AppendUint16(b, 62) // EM_X86_64
	b = le.AppendUint32(b, 1)
	b = le.AppendUint64(b, 0x1000000) // entry
	b = le.AppendUint64(b, 64)        // program headers' offset
	b = le.AppendUint64(b, 0)         // no section headers
	b = le.AppendUint32(b, 0)
	b = le.AppendUint16(b, 64)
	b = le.AppendUint16(b, 56)
	b = le.AppendUint16(b, 1)
	b = le.AppendUint16(b, 64)
	b = le.AppendUint16(b, 0)
	b = le.AppendUint16(b, 0)
	b = le.AppendUint32(b, 4) // PT_NOTE
	b = le.AppendUint32(b, 4)
	b = le.AppendUint64(b, 120) // the note's offset
	b = le.AppendUint64(b, 0)
	b = le.AppendUint64(b, 0)
	b = le.AppendUint64(b, uint64(len(note)))
	b = le.AppendUint64(b, uint64(len(note)))
	b = le.AppendUint64(b, 4)
	return string(append(b, note...))
}

// TestLoadKernelRechecks: a file found right is not read again while it
// stays the same, but one changed since (in place, or replaced) is
// refused by the next load.
func TestLoadKernelRechecks(t *testing.T) {
	dir := writeKernelDir(t, goodKernelFiles())
	if _, err := LoadKernel(dir); err != nil {
		t.Fatal(err)
	}
	mod := filepath.Join(dir, "modules/virtio.ko")
	write(t, mod, "tampered")
	later := time.Now().Add(time.Second)
	if err := os.Chtimes(mod, later, later); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKernel(dir); !errors.Is(err, ErrNoKernel) || !strings.Contains(err.Error(), mod+":") {
		t.Errorf("a module changed in place after a load: %v, want ErrNoKernel naming it", err)
	}
	write(t, mod, "virtio")
	if _, err := LoadKernel(dir); err != nil {
		t.Fatalf("the module as it was: %v", err)
	}
	order := filepath.Join(dir, "modules.order")
	b, _ := os.ReadFile(order)
	write(t, order+".new", strings.ToUpper(string(b)))
	if err := os.Rename(order+".new", order); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKernel(dir); !errors.Is(err, ErrNoKernel) || !strings.Contains(err.Error(), order+":") {
		t.Errorf("modules.order replaced after a load: %v, want ErrNoKernel naming it", err)
	}
}

func TestFindKernelNone(t *testing.T) {
	_, err := FindKernel(t.TempDir())
	if !errors.Is(err, ErrNoKernel) || !strings.Contains(err.Error(), "guest-kernel.sh") {
		t.Errorf("got %v, want ErrNoKernel telling how to fetch one", err)
	}
}

// TestLoadKernelRefuses checks that a kernel directory whose files do not
// match the manifest, or whose manifest lacks what the guest boots, is
// refused with an error naming the file.
func TestLoadKernelRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after func(t *testing.T, dir string) // changes the directory after the manifest is written
		files func(map[string]string)        // changes the files before
		file  string                         // the file the error must name
	}{
		{name: "altered module", file: "modules/virtio_mmio.ko", after: func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "modules/virtio_mmio.ko"), "tampered")
		}},
		{name: "altered image", file: "vmlinuz", after: func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "vmlinuz"), "other kernel")
		}},
		{name: "missing module", file: "modules/virtio.ko", after: func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "modules/virtio.ko"))
		}},
		{name: "no manifest", file: ManifestName, after: func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, ManifestName))
		}},
		{name: "manifest line", file: ManifestName, after: func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, ManifestName), "not a checksum  vmlinuz\n")
		}},
		{name: "manifest escapes", file: ManifestName, after: func(t *testing.T, dir string) {
			sum := sha256.Sum256(nil)
			b, _ := os.ReadFile(filepath.Join(dir, ManifestName))
			write(t, filepath.Join(dir, ManifestName), string(b)+hex.EncodeToString(sum[:])+"  ../outside\n")
		}},
		{name: "image unlisted", file: ManifestName, files: func(m map[string]string) { delete(m, "vmlinuz") }},
		{name: "module unlisted", file: "modules.order", files: func(m map[string]string) {
			m["modules.order"] += "modules/fuse.ko\n"
		}},
		{name: "vmlinux not ELF", file: "vmlinux", files: func(m map[string]string) { m["vmlinux"] = "kernel image" }},
		{name: "vmlinux without PVH", file: "vmlinux", files: func(m map[string]string) { m["vmlinux"] = elfKernel(0) }},
		{name: "vmlinux other note", file: "vmlinux", files: func(m map[string]string) { m["vmlinux"] = elfKernel(17) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := goodKernelFiles()
			if tc.files != nil {
				tc.files(files)
			}
			dir := writeKernelDir(t, files)
			if tc.after != nil {
				tc.after(t, dir)
			}
			_, err := LoadKernel(dir)
			if !errors.Is(err, ErrNoKernel) {
				t.Fatalf("got %v, want ErrNoKernel", err)
			}
			if !strings.Contains(err.Error(), filepath.Join(dir, tc.file)+":") {
				t.Errorf("error %q does not name %s", err, tc.file)
			}
		})
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
