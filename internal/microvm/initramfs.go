package microvm

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/microvm/guest"
)

// libDirs are the directories where the libraries of a dynamically linked
// init binary are looked for, as the dynamic loader of Debian's amd64
// libc looks for them without a cache.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// WriteInitramfs writes the guest's initramfs to w, an uncompressed cpio
// archive of the "newc" format the kernel unpacks: the directories /dev
// (with /dev/console, the console the kernel opens for init), /proc, /sys
// and /tmp, the binary init as /init, the kernel's modules under /modules
// with their load order in /modules/order, and, when init is linked
// dynamically, its ELF interpreter and the libraries it needs, from the
// host, at the paths the loader looks for them. It is not compressed: the
// kernel copies an uncompressed archive faster than it inflates a gzip
// one, which matters most under software emulation, and the archive lives
// only for the VM's boot.
func WriteInitramfs(w io.Writer, init string, k *Kernel) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	cw := &cpioWriter{w: bw}
	dirs := map[string]bool{}
	mkdirs := func(p string) error {
		var missing []string
		for d := path.Dir(p); d != "/" && !dirs[d]; d = path.Dir(d) {
			missing = append(missing, d)
		}
		slices.Reverse(missing)
		for _, d := range missing {
			dirs[d] = true
			perm := uint32(0o755)
			if d == "/tmp" {
				perm = 0o1777 // anyone's, as /tmp is
			}
			if err := cw.dir(d, perm); err != nil {
				return err
			}
		}
		return nil
	}
	for _, d := range []string{"/dev/x", "/proc/x", "/sys/x", "/tmp/x", guest.ModuleDir + "/x"} {
		if err := mkdirs(d); err != nil {
			return err
		}
	}
	if err := cw.device("/dev/console", 0o600, 5, 1); err != nil {
		return err
	}
	if err := cw.file(guest.InitPath, 0o755, init); err != nil {
		return err
	}
	libs, err := sharedLibs(init)
	if err != nil {
		return err
	}
	for _, lib := range libs {
		if err := mkdirs(lib); err != nil {
			return err
		}
		if err := cw.file(lib, 0o755, lib); err != nil {
			return err
		}
	}
	var order strings.Builder
	for _, m := range k.Modules {
		name := filepath.Base(m)
		if err := cw.file(guest.ModuleDir+"/"+name, 0o644, m); err != nil {
			return err
		}
		order.WriteString(name + "\n")
	}
	if err := cw.bytes(guest.ModuleOrder, 0o644, []byte(order.String())); err != nil {
		return err
	}
	if err := cw.trailer(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("microvm: write initramfs: %w", err)
	}
	return nil
}

// BuildInitramfs writes the initramfs of WriteInitramfs to a new file at
// dst (mode 0600).
func BuildInitramfs(dst, init string, k *Kernel) error {
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("microvm: initramfs: %w", err)
	}
	err = WriteInitramfs(f, init, k)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("microvm: initramfs: %w", cerr)
	}
	if err != nil {
		os.Remove(dst)
	}
	return err
}

// sharedLibs returns what a dynamically linked bin needs to run, the host's
// paths of its ELF interpreter and of the libraries it needs (and they
// need), or nothing for a static binary.
func sharedLibs(bin string) ([]string, error) {
	f, err := elf.Open(bin)
	if err != nil {
		return nil, fmt.Errorf("microvm: init binary %s: %w", bin, err)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("microvm: init binary %s is for %s, not the guest's x86-64", bin, f.Machine)
	}
	interp := ""
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				return nil, fmt.Errorf("microvm: init binary %s: interpreter: %w", bin, err)
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	if interp == "" {
		return nil, nil
	}
	if !filepath.IsAbs(interp) {
		return nil, fmt.Errorf("microvm: init binary %s: interpreter %q is not an absolute path", bin, interp)
	}
	libs := []string{interp}
	// The loader is loaded already when a library names it by its name.
	seen := map[string]bool{filepath.Base(interp): true}
	var walk func(*elf.File, string) error
	walk = func(f *elf.File, name string) error {
		needed, err := f.ImportedLibraries()
		if err != nil {
			return fmt.Errorf("microvm: %s: %w", name, err)
		}
		for _, lib := range needed {
			if seen[lib] {
				continue
			}
			seen[lib] = true
			p, err := findLib(lib)
			if err != nil {
				return fmt.Errorf("microvm: %s needs %s: %w", name, lib, err)
			}
			libs = append(libs, p)
			lf, err := elf.Open(p)
			if err != nil {
				return fmt.Errorf("microvm: %s: %w", p, err)
			}
			err = walk(lf, p)
			lf.Close()
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(f, bin); err != nil {
		return nil, err
	}
	return libs, nil
}

func findLib(name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, d := range libDirs {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("not found in %s", strings.Join(libDirs, ", "))
}

// cpioWriter writes a cpio archive of the "newc" format, the one the
// kernel unpacks as an initramfs. It is written here rather than taken
// from a library: the format is a 110-byte header of hexadecimal fields,
// the name and the data, each padded to 4 bytes, and hutch writes only
// directories, regular files and one device node; the Go libraries of the
// format come either inside a large module of unrelated programs or
// unmaintained.
type cpioWriter struct {
	w   io.Writer
	ino uint32
	n   int64 // bytes written
}

const (
	cpioDir  = 0o040000
	cpioReg  = 0o100000
	cpioChar = 0o020000
)

func (c *cpioWriter) write(b []byte) error {
	n, err := c.w.Write(b)
	c.n += int64(n)
	if err != nil {
		return fmt.Errorf("microvm: write initramfs: %w", err)
	}
	return nil
}

func (c *cpioWriter) pad() error {
	if r := c.n % 4; r != 0 {
		return c.write(make([]byte, 4-r))
	}
	return nil
}

// header writes the header and the name of an entry of size bytes; name
// is absolute or "TRAILER!!!".
func (c *cpioWriter) header(name string, mode uint32, size int64, rmajor, rminor uint32) error {
	if size > 0xffffffff {
		return fmt.Errorf("microvm: initramfs: %s is larger than 4 GiB", name)
	}
	name = strings.TrimPrefix(name, "/")
	c.ino++
	nlink := uint32(1)
	if mode&0o170000 == cpioDir {
		nlink = 2
	}
	h := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, nlink, 0, uint32(size), 0, 0, rmajor, rminor, len(name)+1, 0)
	if err := c.write([]byte(h + name + "\x00")); err != nil {
		return err
	}
	return c.pad()
}

func (c *cpioWriter) dir(name string, perm uint32) error {
	return c.header(name, cpioDir|perm, 0, 0, 0)
}

func (c *cpioWriter) device(name string, perm, major, minor uint32) error {
	return c.header(name, cpioChar|perm, 0, major, minor)
}

func (c *cpioWriter) bytes(name string, perm uint32, b []byte) error {
	if err := c.header(name, cpioReg|perm, int64(len(b)), 0, 0); err != nil {
		return err
	}
	if err := c.write(b); err != nil {
		return err
	}
	return c.pad()
}

// file writes the regular file at src (a symbolic link is followed) as
// name.
func (c *cpioWriter) file(name string, perm uint32, src string) error {
	f, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("microvm: initramfs: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("microvm: initramfs: %w", err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("microvm: initramfs: %s is not a regular file", src)
	}
	if err := c.header(name, cpioReg|perm, st.Size(), 0, 0); err != nil {
		return err
	}
	n, err := io.Copy(c.w, io.LimitReader(f, st.Size()))
	c.n += n
	if err != nil {
		return fmt.Errorf("microvm: initramfs: %s: %w", src, err)
	}
	if n != st.Size() {
		return fmt.Errorf("microvm: initramfs: %s: %w", src, errors.New("file changed size while read"))
	}
	return c.pad()
}

func (c *cpioWriter) trailer() error {
	return c.header("TRAILER!!!", 0, 0, 0, 0)
}
