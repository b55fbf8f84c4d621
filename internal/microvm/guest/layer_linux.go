package guest

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/image/export"
)

// exportLayer writes what the sandbox wrote over its root — the upper
// directory of the layer's tmpfs, of which layer is a descriptor
// (switchRoot) — to w as an OCI layer's tar (export.WriteLayer). The host
// takes it for a snapshot of the guest, as hostile input.
func exportLayer(layer int, w io.Writer) error {
	return export.WriteLayer(w, fmt.Sprintf("/proc/self/fd/%d/upper", layer))
}

// The random device's ioctls (linux/random.h): RNDADDENTROPY takes a
// struct rand_pool_info {int entropy_count; int buf_size; u32 buf[]},
// RNDRESEEDCRNG nothing.
const (
	rndAddEntropy  = 0x40085203
	rndReseedCRNG  = 0x5207
	maxReseedBytes = 256
)

// reseed mixes b into the kernel's random pool, credited as entropy, and
// has the kernel reseed its generator from it at once.
func reseed(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	b = b[:min(len(b), maxReseedBytes)]
	f, err := os.OpenFile("/dev/random", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	info := make([]byte, 8+len(b)+3) // buf is whole u32s
	binary.NativeEndian.PutUint32(info[0:], uint32(len(b)*8))
	binary.NativeEndian.PutUint32(info[4:], uint32(len(b)))
	copy(info[8:], b)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), rndAddEntropy, uintptr(unsafe.Pointer(&info[0]))); e != 0 {
		return fmt.Errorf("RNDADDENTROPY: %w", e)
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), rndReseedCRNG, 0); e != 0 {
		return fmt.Errorf("RNDRESEEDCRNG: %w", e)
	}
	return nil
}
