package microvm

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
