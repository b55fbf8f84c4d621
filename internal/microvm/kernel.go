package microvm

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
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
	// Image is the kernel image QEMU boots: vmlinux, the kernel
	// uncompressed with a PVH entry, when the manifest lists one (QEMU
	// then loads it as it is, without the decompression and relocation of
	// a vmlinuz, a second or so of each boot under emulation); else
	// Packaged.
	Image string
	// Packaged is the kernel image as its package has it, vmlinuz.
	Packaged string
	// packagedSum is Packaged's checksum in the manifest, checked when
	// Packaged is not Image and a restore asks for it (imageNamed).
	packagedSum string
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
// manifest lists against its checksum (vmlinuz, when vmlinux is there to
// boot, only if a restore asks for it: imageNamed), and that the manifest lists the
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
	for _, name := range []string{packagedImage, "modules.order"} {
		if _, ok := sums[name]; !ok {
			return nil, fail(ManifestName, "%s is not listed", name)
		}
	}
	_, unpacked := sums[unpackedImage]
	for name, want := range sums {
		if unpacked && name == packagedImage {
			// Not booted: checked when a restore asks for it
			// (imageNamed), not at every start.
			continue
		}
		if err := checkSum(dir, name, want); err != nil {
			return nil, fail(name, "%v", err)
		}
	}
	k := &Kernel{Dir: dir, Release: filepath.Base(dir), Packaged: filepath.Join(dir, packagedImage), packagedSum: sums[packagedImage]}
	k.Image = k.Packaged
	if unpacked {
		if err := checkPVH(filepath.Join(dir, unpackedImage)); err != nil {
			return nil, fail(unpackedImage, "%v", err)
		}
		k.Image = filepath.Join(dir, unpackedImage)
	}
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

// The names of a kernel directory's images: the package's, compressed,
// and the same kernel uncompressed.
const (
	packagedImage = "vmlinuz"
	unpackedImage = "vmlinux"
)

// imageNamed returns k booting its image of the given base name: "" (a
// guest saved before kernels had vmlinux) is the packaged one, checked
// against the manifest here when LoadKernel did not (it boots vmlinux).
func (k *Kernel) imageNamed(name string) (*Kernel, error) {
	c := *k
	switch name {
	case "", filepath.Base(k.Packaged):
		if k.Image != k.Packaged {
			if err := checkSum(k.Dir, packagedImage, k.packagedSum); err != nil {
				return nil, fmt.Errorf("microvm: guest kernel %s: %v: %w", k.Packaged, err, ErrNoKernel)
			}
		}
		c.Image = k.Packaged
	case filepath.Base(k.Image):
	default:
		return nil, fmt.Errorf("microvm: guest kernel %s has no image %s", k.Dir, name)
	}
	return &c, nil
}

// xenPhys32Entry is the type of the Xen ELF note (XEN_ELFNOTE_PHYS32_ENTRY)
// that gives a kernel's 32-bit PVH entry point, which QEMU boots an ELF
// kernel by.
const xenPhys32Entry = 18

// checkPVH checks that path is an x86-64 ELF kernel with a PVH entry.
func checkPVH(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 {
		return fmt.Errorf("an ELF file for %v, not x86-64", f.Machine)
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz > 1<<20 {
			continue
		}
		b, err := io.ReadAll(p.Open())
		if err != nil {
			return err
		}
		for len(b) >= 12 {
			namesz, descsz, typ := f.ByteOrder.Uint32(b), f.ByteOrder.Uint32(b[4:]), f.ByteOrder.Uint32(b[8:])
			nameEnd := 12 + (uint64(namesz)+3)&^3
			end := nameEnd + (uint64(descsz)+3)&^3
			if end > uint64(len(b)) {
				break
			}
			if string(bytes.TrimRight(b[12:12+uint64(namesz)], "\x00")) == "Xen" && typ == xenPhys32Entry {
				return nil
			}
			b = b[end:]
		}
	}
	return errors.New("no PVH entry (Xen note PHYS32_ENTRY): QEMU cannot boot it as an ELF kernel")
}

// localName reports whether name is a relative path that stays in its
// directory.
func localName(name string) bool {
	return name != "" && filepath.IsLocal(name) && filepath.Clean(name) == name
}

// checked remembers, by path, the files checkSum found right: one that
// is still the same file (os.SameFile), of the same size and modification
// time, is not read again. A daemon checks its kernel at every start,
// some 70 MB.
var checked sync.Map // path → checkedFile

type checkedFile struct {
	fi  os.FileInfo
	sum string
}

// checkSum checks that the file name of dir has the SHA-256 checksum
// want (hex).
func checkSum(dir, name, want string) error {
	path := filepath.Join(dir, name)
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if v, ok := checked.Load(path); ok {
		if c := v.(checkedFile); c.sum == want && os.SameFile(c.fi, fi) && c.fi.Size() == fi.Size() && c.fi.ModTime().Equal(fi.ModTime()) {
			return nil
		}
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("checksum %s, the manifest says %s (the file changed since it was fetched)", got, want)
	}
	checked.Store(path, checkedFile{fi: fi, sum: want})
	return nil
}
