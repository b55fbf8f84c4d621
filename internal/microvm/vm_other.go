//go:build !linux

package microvm

import (
	"context"
	"net"
)

// Config is what Boot needs to start a VM; see the Linux build.
type Config struct {
	Kernel         *Kernel
	Init           string
	Initramfs      string
	QEMU           string
	MemoryMiB      int
	CPUs           int
	AllowEmulation bool
	Dir            string
}

// VM is a running guest; none runs on this platform.
type VM struct{}

// Boot fails with ErrNotSupported: the microVM tier runs on Linux hosts.
func Boot(ctx context.Context, cfg Config) (*VM, error) { return nil, ErrNotSupported }

// Conn is nil.
func (v *VM) Conn() net.Conn { return nil }

// Done is a closed channel.
func (v *VM) Done() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// Close does nothing.
func (v *VM) Close() error { return nil }
