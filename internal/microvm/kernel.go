package microvm

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// DefaultKernelCache is the directory scripts/guest-kernel.sh keeps guest
// kernels in, one directory per kernel release and a symbolic link
// "current" to the last one fetched.
const DefaultKernelCache = "/var/cache/hutch/guest-kernel"

// ManifestName is the file of a kernel directory that lists the SHA-256
// checksum of every other file, in sha256sum's format.
const ManifestName = "SHA256SUMS"

// ErrNoKernel is wrapped by the errors of FindKernel and LoadKernel when
// there is no usable guest kernel: none fetched, or a file missing or
// altered.
var ErrNoKernel = errors.New("no usable guest kernel")

// ErrNotSupported is the error of Boot on a host that is not Linux.
var ErrNotSupported = errors.New("microvm: not supported on this platform")

// Kernel is a guest kernel of the cache, its files checked against the
// manifest.
type Kernel struct {
	// Dir is the kernel's directory.
	Dir string
	// Release is the kernel's release (its uname -r), the directory's name.
	Release string
	// Image is the kernel image QEMU boots (vmlinuz).
	Image string
	// Modules are the paths of the modules the guest loads, in load order:
	// each after those it depends on.
	Modules []string
	// Builtin names the drivers the guest wants that the kernel has built
	// in (no module to load).
	Builtin []string
}

// FindKernel returns the kernel that the link "current" of cache names
// ("" means DefaultKernelCache), checked as LoadKernel does.
func FindKernel(cache string) (*Kernel, error) {
	if cache == "" {
		cache = DefaultKernelCache
	}
	dir, err := filepath.EvalSymlinks(filepath.Join(cache, "current"))
	if err != nil {
		return nil, fmt.Errorf("microvm: guest kernel in %s (fetch one with scripts/guest-kernel.sh): %w: %w", cache, ErrNoKernel, err)
	}
	return LoadKernel(dir)
}

// LoadKernel returns the kernel of dir after checking every file its
// manifest lists against its checksum, and that the manifest lists the
// image, the load order and every module of that order. An error names
// the file at fault and wraps ErrNoKernel.
func LoadKernel(dir string) (*Kernel, error) {
	dir = filepath.Clean(dir)
	fail := func(name, format string, args ...any) error {
		return fmt.Errorf("microvm: guest kernel %s: %s: %w", filepath.Join(dir, name), fmt.Sprintf(format, args...), ErrNoKernel)
	}
	manifest, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		return nil, fail(ManifestName, "%v (fetch the kernel again with scripts/guest-kernel.sh)", err)
	}
	sums := make(map[string]string)
	sc := bufio.NewScanner(bytes.NewReader(manifest))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" {
			continue
		}
		sum, name, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != sha256.Size*2 || !localName(name) {
			return nil, fail(ManifestName, "line %d: not a sha256sum line", n)
		}
		sums[name] = sum
	}
	for _, name := range []string{"vmlinuz", "modules.order"} {
		if _, ok := sums[name]; !ok {
			return nil, fail(ManifestName, "%s is not listed", name)
		}
	}
	for name, want := range sums {
		got, err := fileSHA256(filepath.Join(dir, name))
		if err != nil {
			return nil, fail(name, "%v", err)
		}
		if got != want {
			return nil, fail(name, "checksum %s, the manifest says %s (the file changed since it was fetched)", got, want)
		}
	}
	k := &Kernel{Dir: dir, Release: filepath.Base(dir), Image: filepath.Join(dir, "vmlinuz")}
	order, err := os.ReadFile(filepath.Join(dir, "modules.order"))
	if err != nil {
		return nil, fail("modules.order", "%v", err)
	}
	for _, name := range strings.Fields(string(order)) {
		if _, ok := sums[name]; !ok || !strings.HasSuffix(name, ".ko") {
			return nil, fail("modules.order", "%s is not a module the manifest lists", name)
		}
		k.Modules = append(k.Modules, filepath.Join(dir, name))
	}
	if _, ok := sums["builtin"]; ok {
		b, err := os.ReadFile(filepath.Join(dir, "builtin"))
		if err != nil {
			return nil, fail("builtin", "%v", err)
		}
		k.Builtin = strings.Fields(string(b))
	}
	return k, nil
}

// localName reports whether name is a relative path that stays in its
// directory.
func localName(name string) bool {
	return name != "" && filepath.IsLocal(name) && filepath.Clean(name) == name
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
