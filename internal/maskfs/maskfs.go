// Package maskfs serves the stand-ins hutch mounts over the paths a
// sandbox may not read (deny-read masks) and over the protected paths hutch
// placed (placeholders), as a small FUSE filesystem whose server is hutch.
//
// A mask on a tmpfs refuses the sandbox in the kernel, and nobody learns
// of it: the command sees "Permission denied" or "Read-only file system"
// and hutch has nothing to report. Served by hutch, every stand-in is a
// node of its own that names the path it covers, so each refusal reaches
// hutch, which records it (path, what was tried) and says at exit which
// rule refused it and what would allow it.
//
// The filesystem is read-only in what it serves, whatever the mount's
// flags: it answers every request that would change it (write, create,
// remove, rename, link, attributes, extended attributes) with an error,
// and it answers every access to a hidden node with EACCES, so a stand-in
// gives away nothing of what it covers. It holds no host file: its nodes
// are a list in memory, so a request from the sandbox can reach nothing
// else. Requests are parsed defensively: a request shorter than its
// opcode's arguments gets EIO.
//
// The FUSE protocol is spoken directly (fuse(4); the layouts are those of
// <linux/fuse.h>), not through a library: hutch answers a dozen requests
// on a fixed tree of empty files, and the Go FUSE libraries do work at
// package initialization (tables, and descriptors held for good) that
// every start of hutch would pay for.
package maskfs

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Op is what the sandbox tried at a stand-in.
type Op string

// What a refused request tried.
const (
	OpRead   Op = "read"   // open to read, list, enter, or look a name up
	OpWrite  Op = "write"  // open to write or truncate
	OpCreate Op = "create" // create or link a name below it
	OpRemove Op = "remove" // remove or rename it or a name below it
	OpChange Op = "change" // change its mode, owner, times or attributes
)

// Node is one stand-in: a file or directory at the root of the
// filesystem, named Name there.
type Node struct {
	// Name is its name at the root of the filesystem (no '/').
	Name string
	// Dir makes it a directory (always empty).
	Dir bool
	// Hidden refuses every access to it, and to any name below it, with
	// EACCES: a deny-read mask. Otherwise it may be read (a file's
	// content is Data), and every change is refused with EROFS.
	Hidden bool
	// Mode is its permission bits (0 for a hidden node).
	Mode uint32
	// Data is a file's content.
	Data []byte
	// Path is the path it covers in the sandbox's view, which refusals
	// name; "" for a node that covers nothing (it refuses unrecorded).
	Path string
}

// Refusal is one refused request.
type Refusal struct {
	// Node is the index of the stand-in in the list given to New.
	Node int
	// Path is the path in the sandbox's view: the node's Path, or a name
	// below it.
	Path string
	Op   Op
}

// FS is a stand-in filesystem and its server.
type FS struct {
	nodes    atomic.Pointer[[]Node] // set by New or SetNodes
	uid, gid uint32
	record   func(Refusal)

	dev  int // /dev/fuse, non-blocking
	stop int // an eventfd: Close writes it to end the server
	done chan struct{}
	once sync.Once
}

// New returns the filesystem of nodes, owned by uid and gid as the kernel
// sees ids in the mount's user namespace. record, if not nil, is called
// for every refused request of a node with a Path; it is called from the
// server's goroutine and must not block for long.
func New(nodes []Node, uid, gid uint32, record func(Refusal)) *FS {
	f := &FS{uid: uid, gid: gid, record: record, dev: -1, stop: -1, done: make(chan struct{})}
	f.SetNodes(nodes)
	return f
}

// SetNodes replaces the filesystem's nodes. Mounting takes the kernel a
// while (it registers the filesystem as a device), so hutch mounts before
// it knows every path, and gives the nodes before the sandbox asks for
// them; requests in between see the nodes given before.
func (f *FS) SetNodes(nodes []Node) {
	f.nodes.Store(&nodes)
}

// Mount creates the filesystem and returns its detached mount (nosuid,
// nodev, noexec), and starts serving it; the caller owns the descriptor.
// It needs CAP_SYS_ADMIN (hutch as root) and /dev/fuse. The server ends
// when Close is called or when the last mount of the filesystem is gone.
func (f *FS) Mount() (int, error) {
	dev, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, fmt.Errorf("maskfs: open /dev/fuse: %w", err)
	}
	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(dev)
		return -1, fmt.Errorf("maskfs: eventfd: %w", err)
	}
	mnt, err := mountFuse(dev)
	if err != nil {
		unix.Close(dev)
		unix.Close(stop)
		return -1, err
	}
	f.dev, f.stop = dev, stop
	go f.serve()
	return mnt, nil
}

// Serve serves the filesystem on dev, a /dev/fuse descriptor another
// process mounted it with (the sandbox's first process, in its own user
// namespace: the kernel takes only a device opened there), and takes
// dev over. It returns at once; the server ends as Mount's does.
func (f *FS) Serve(dev int) error {
	if err := unix.SetNonblock(dev, true); err != nil {
		unix.Close(dev)
		return fmt.Errorf("maskfs: %w", err)
	}
	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(dev)
		return fmt.Errorf("maskfs: eventfd: %w", err)
	}
	f.dev, f.stop = dev, stop
	go f.serve()
	return nil
}

// MountOptions returns the options the filesystem is created with, on
// the /dev/fuse descriptor dev, by a creator whose user namespace maps uid
// and gid (the same where hutch mounts it and where the sandbox's first
// process does).
func MountOptions(dev int, uid, gid uint32) [][2]string {
	return [][2]string{
		{"source", "hutch"},
		{"fd", strconv.Itoa(dev)},
		{"rootmode", "40555"},
		{"user_id", strconv.FormatUint(uint64(uid), 10)},
		{"group_id", strconv.FormatUint(uint64(gid), 10)},
		{"allow_other", ""},
	}
}

// mountFuse creates the filesystem served on dev and returns its detached
// mount.
func mountFuse(dev int) (int, error) {
	fs, err := unix.Fsopen("fuse", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("maskfs: fsopen fuse: %w", err)
	}
	defer unix.Close(fs)
	for _, o := range MountOptions(dev, 0, 0) {
		if o[1] == "" {
			err = unix.FsconfigSetFlag(fs, o[0])
		} else {
			err = unix.FsconfigSetString(fs, o[0], o[1])
		}
		if err != nil {
			return -1, fmt.Errorf("maskfs: fsconfig %s: %w", o[0], err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, fmt.Errorf("maskfs: create: %w", err)
	}
	mnt, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return -1, fmt.Errorf("maskfs: fsmount: %w", err)
	}
	return mnt, nil
}

// Close stops the server and waits for it to end; requests still to come
// fail (ENOTCONN) once the descriptor is closed.
func (f *FS) Close() {
	f.once.Do(func() {
		if f.dev < 0 {
			close(f.done)
			return
		}
		_, _ = unix.Write(f.stop, []byte{1, 0, 0, 0, 0, 0, 0, 0})
		<-f.done
		unix.Close(f.dev)
		unix.Close(f.stop)
	})
}

// FUSE opcodes (<linux/fuse.h>).
const (
	opLookup      = 1
	opForget      = 2
	opGetattr     = 3
	opSetattr     = 4
	opReadlink    = 5
	opSymlink     = 6
	opMknod       = 8
	opMkdir       = 9
	opUnlink      = 10
	opRmdir       = 11
	opRename      = 12
	opLink        = 13
	opOpen        = 14
	opRead        = 15
	opWrite       = 16
	opStatfs      = 17
	opRelease     = 18
	opFsync       = 20
	opSetxattr    = 21
	opGetxattr    = 22
	opListxattr   = 23
	opRemovexattr = 24
	opFlush       = 25
	opInit        = 26
	opOpendir     = 27
	opReaddir     = 28
	opReleasedir  = 29
	opFsyncdir    = 30
	opAccess      = 34
	opCreate      = 35
	opInterrupt   = 36
	opDestroy     = 38
	opBatchForget = 42
	opFallocate   = 43
	opReaddirplus = 44
	opRename2     = 45
	opSyncfs      = 50
	opTmpfile     = 51
)

// Sizes of the protocol's structures.
const (
	inHeaderLen  = 40
	outHeaderLen = 16
	attrLen      = 88
	entryOutLen  = 40 + attrLen
	attrOutLen   = 16 + attrLen
	initOutLen   = 64
	statfsOutLen = 80
	openOutLen   = 16
	direntLen    = 24

	rootID = 1
	// bufLen is the read buffer: the kernel's minimum (8 KiB) covers every
	// request with max_write at one page; longer ones (a large setxattr)
	// fail in the kernel without reaching hutch.
	bufLen   = 16 << 10
	maxWrite = 4096
	// valid is how long, in seconds, the kernel may keep names and
	// attributes: they never change.
	valid = 1 << 20

	protoMajor = 7
	protoMinor = 31

	flagDoReaddirplus = 1 << 13 // FUSE_DO_READDIRPLUS
)

// serve reads and answers requests until the device is closed or the
// filesystem is gone.
func (f *FS) serve() {
	defer close(f.done)
	buf := make([]byte, bufLen)
	out := make([]byte, 0, bufLen)
	// poll(2), level-triggered, on a thread of its own: the device and
	// the stop event.
	fds := []unix.PollFd{{Fd: int32(f.dev), Events: unix.POLLIN}, {Fd: int32(f.stop), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			return
		}
		if fds[1].Revents != 0 {
			return // Close
		}
		n, err := unix.Read(f.dev, buf)
		if err != nil {
			if err == unix.EAGAIN || err == unix.EINTR || err == unix.ENOENT {
				continue // nothing yet, interrupted, or a request the kernel dropped
			}
			return // unmounted or aborted (ENODEV)
		}
		if n < inHeaderLen {
			continue
		}
		out = f.answer(buf[:n], out[:0])
		if len(out) > 0 {
			_, _ = unix.Write(f.dev, out)
		}
	}
}

var ne = binary.NativeEndian

// answer returns the reply to the request in req (nothing for a request
// that takes none).
func (f *FS) answer(req, out []byte) []byte {
	opcode := ne.Uint32(req[4:])
	unique := ne.Uint64(req[8:])
	nodeid := ne.Uint64(req[16:])
	in := req[inHeaderLen:]
	if l := ne.Uint32(req); int(l) < len(req) {
		in = req[inHeaderLen:max(l, inHeaderLen)]
	}
	reply := func(errno unix.Errno, body ...[]byte) []byte {
		out = ne.AppendUint32(out, 0) // length, set below
		out = ne.AppendUint32(out, uint32(-int32(errno)))
		out = ne.AppendUint64(out, unique)
		for _, b := range body {
			out = append(out, b...)
		}
		ne.PutUint32(out, uint32(len(out)))
		return out
	}
	nodes := *f.nodes.Load()
	node, isNode := nodeOf(nodes, nodeid)
	refuse := func(path string, op Op, errno unix.Errno) []byte {
		if path != "" && f.record != nil {
			f.record(Refusal{Node: int(nodeid) - 2, Path: path, Op: op})
		}
		return reply(errno)
	}
	// changed refuses a change at the node, or below it for a directory
	// (name is the name below it, "" for the node itself).
	changed := func(op Op, name string) []byte {
		if nodeid == rootID || !isNode {
			return reply(unix.EROFS)
		}
		errno := unix.EROFS
		if node.Hidden {
			errno = unix.EACCES
		}
		return refuse(below(node.Path, name), op, errno)
	}

	switch opcode {
	case opInit:
		if len(in) < 16 {
			return reply(unix.EIO)
		}
		major, minor, readahead := ne.Uint32(in), ne.Uint32(in[4:]), ne.Uint32(in[8:])
		if major != protoMajor {
			// A newer major version: answer with ours, the kernel asks again.
			b := make([]byte, 8)
			ne.PutUint32(b, protoMajor)
			ne.PutUint32(b[4:], protoMinor)
			return reply(0, b)
		}
		b := make([]byte, initOutLen)
		ne.PutUint32(b, protoMajor)
		ne.PutUint32(b[4:], min(minor, protoMinor))
		ne.PutUint32(b[8:], readahead)
		// Directories are read with their entries' attributes: one request
		// lists every node, and the kernel keeps their names, so that the
		// sandbox's first process, which lists the root before it clones
		// the nodes, does not ask for them one by one.
		ne.PutUint32(b[12:], flagDoReaddirplus)
		ne.PutUint16(b[16:], 12) // max_background
		ne.PutUint16(b[18:], 9)  // congestion_threshold
		ne.PutUint32(b[20:], maxWrite)
		ne.PutUint32(b[24:], 1) // time_gran
		return reply(0, b)
	case opDestroy:
		return reply(0)
	case opForget, opBatchForget, opInterrupt:
		return nil
	case opLookup:
		name, ok := cstring(in)
		if !ok {
			return reply(unix.EIO)
		}
		if nodeid == rootID {
			for i := range nodes {
				if nodes[i].Name == name {
					return reply(0, entry(nodes, uint64(i)+2, f.uid, f.gid))
				}
			}
			return reply(unix.ENOENT)
		}
		if !isNode {
			return reply(unix.ENOENT)
		}
		if node.Hidden {
			return refuse(below(node.Path, name), OpRead, unix.EACCES)
		}
		return reply(unix.ENOENT) // a stand-in directory is empty
	case opGetattr:
		if nodeid != rootID && !isNode {
			return reply(unix.ENOENT)
		}
		b := make([]byte, attrOutLen)
		ne.PutUint64(b, valid)
		attr(nodes, b[16:], nodeid, f.uid, f.gid)
		return reply(0, b)
	case opSetattr:
		return changed(OpChange, "")
	case opSetxattr, opRemovexattr:
		return changed(OpChange, "")
	case opGetxattr:
		return reply(unix.ENODATA)
	case opListxattr:
		if len(in) >= 4 && ne.Uint32(in) == 0 {
			return reply(0, make([]byte, 8)) // fuse_getxattr_out: size 0
		}
		return reply(0)
	case opReadlink:
		return reply(unix.EINVAL)
	case opMknod, opMkdir, opSymlink, opCreate, opTmpfile:
		return changed(OpCreate, newName(opcode, in))
	case opLink:
		return changed(OpCreate, newName(opcode, in))
	case opUnlink, opRmdir, opRename, opRename2:
		return changed(OpRemove, newName(opcode, in))
	case opOpen, opOpendir:
		if nodeid == rootID {
			return reply(0, make([]byte, openOutLen))
		}
		if !isNode {
			return reply(unix.ENOENT)
		}
		if len(in) < 4 {
			return reply(unix.EIO)
		}
		flags := ne.Uint32(in)
		writes := flags&unix.O_ACCMODE != unix.O_RDONLY || flags&unix.O_TRUNC != 0
		switch {
		case node.Hidden && writes:
			return refuse(node.Path, OpWrite, unix.EACCES)
		case node.Hidden:
			return refuse(node.Path, OpRead, unix.EACCES)
		case writes:
			return refuse(node.Path, OpWrite, unix.EROFS)
		}
		b := make([]byte, openOutLen)
		ne.PutUint32(b[8:], 1<<1) // FOPEN_KEEP_CACHE: the content never changes
		return reply(0, b)
	case opRead:
		if !isNode || node.Hidden || len(in) < 20 {
			return reply(unix.EIO)
		}
		off, size := ne.Uint64(in[8:]), ne.Uint32(in[16:])
		data := node.Data
		if off >= uint64(len(data)) {
			return reply(0)
		}
		data = data[off:]
		if uint64(len(data)) > uint64(size) {
			data = data[:size]
		}
		return reply(0, data)
	case opReaddir, opReaddirplus:
		if len(in) < 20 {
			return reply(unix.EIO)
		}
		return reply(0, f.readdir(nodes, nodeid, ne.Uint64(in[8:]), int(ne.Uint32(in[16:])), opcode == opReaddirplus))
	case opWrite, opFallocate:
		return changed(OpWrite, "")
	case opAccess:
		if len(in) < 4 {
			return reply(unix.EIO)
		}
		mask := ne.Uint32(in)
		switch {
		case nodeid == rootID || !isNode:
			return reply(0)
		case node.Hidden && mask != 0:
			return refuse(node.Path, OpRead, unix.EACCES)
		case mask&unix.W_OK != 0:
			return reply(unix.EROFS) // a question, not an attempt: unrecorded
		}
		return reply(0)
	case opStatfs:
		b := make([]byte, statfsOutLen)
		ne.PutUint32(b[40:], 4096) // bsize
		ne.PutUint32(b[44:], 255)  // namelen
		ne.PutUint32(b[48:], 4096) // frsize
		return reply(0, b)
	case opRelease, opReleasedir, opFlush, opFsync, opFsyncdir, opSyncfs:
		return reply(0)
	}
	return reply(unix.ENOSYS)
}

// nodeOf returns the stand-in of nodeid among nodes.
func nodeOf(nodes []Node, nodeid uint64) (Node, bool) {
	if nodeid < 2 || nodeid-2 >= uint64(len(nodes)) {
		return Node{}, false
	}
	return nodes[nodeid-2], true
}

// entry returns the fuse_entry_out of nodeid.
func entry(nodes []Node, nodeid uint64, uid, gid uint32) []byte {
	b := make([]byte, entryOutLen)
	ne.PutUint64(b, nodeid)
	ne.PutUint64(b[16:], valid)
	ne.PutUint64(b[24:], valid)
	attr(nodes, b[40:], nodeid, uid, gid)
	return b
}

// attr fills the fuse_attr of nodeid into b.
func attr(nodes []Node, b []byte, nodeid uint64, uid, gid uint32) {
	mode, nlink, size := uint32(unix.S_IFDIR|0o555), uint32(2), 0
	if n, ok := nodeOf(nodes, nodeid); ok {
		mode, nlink, size = n.Mode&0o777|unix.S_IFREG, 1, len(n.Data)
		if n.Dir {
			mode, nlink = n.Mode&0o777|unix.S_IFDIR, 2
		}
	}
	ne.PutUint64(b, nodeid) // ino
	ne.PutUint64(b[8:], uint64(size))
	ne.PutUint64(b[16:], uint64(size+511)/512)
	ne.PutUint32(b[60:], mode)
	ne.PutUint32(b[64:], nlink)
	ne.PutUint32(b[68:], uid)
	ne.PutUint32(b[72:], gid)
	ne.PutUint32(b[80:], 4096) // blksize
}

// readdir returns the entries of directory nodeid from index off, at most
// size bytes of them, with their attributes when plus is set: the root
// lists the nodes, a stand-in directory only "." and "..".
func (f *FS) readdir(nodes []Node, nodeid, off uint64, size int, plus bool) []byte {
	type ent struct {
		ino  uint64
		name string
		dir  bool
	}
	ents := []ent{{nodeid, ".", true}, {rootID, "..", true}}
	if nodeid == rootID {
		for i, n := range nodes {
			ents = append(ents, ent{uint64(i) + 2, n.Name, n.Dir})
		}
	}
	var b []byte
	for i := off; i < uint64(len(ents)); i++ {
		e := ents[i]
		var eo []byte
		if plus {
			// "." and ".." go without an entry (node 0), which the
			// kernel skips.
			eo = make([]byte, entryOutLen)
			if e.name != "." && e.name != ".." {
				eo = entry(nodes, e.ino, f.uid, f.gid)
			}
		}
		rec := (len(eo) + direntLen + len(e.name) + 7) &^ 7
		if len(b)+rec > size {
			break
		}
		typ := uint32(unix.DT_REG)
		if e.dir {
			typ = unix.DT_DIR
		}
		full := make([]byte, rec)
		copy(full, eo)
		d := full[len(eo):]
		ne.PutUint64(d, e.ino)
		ne.PutUint64(d[8:], i+1)
		ne.PutUint32(d[16:], uint32(len(e.name)))
		ne.PutUint32(d[20:], typ)
		copy(d[direntLen:], e.name)
		b = append(b, full...)
	}
	return b
}

// newName returns the name a request that makes, links, removes or
// renames names below a directory names ("" when it names none or is
// malformed): the first name for most, after the fixed arguments.
func newName(opcode uint32, in []byte) string {
	skip := 0
	switch opcode {
	case opMknod, opCreate:
		skip = 16
	case opMkdir:
		skip = 8
	case opLink, opRename:
		skip = 8
	case opRename2:
		skip = 16
	case opTmpfile:
		return ""
	}
	if len(in) < skip {
		return ""
	}
	name, _ := cstring(in[skip:])
	return name
}

// cstring returns the NUL-terminated string at the start of b.
func cstring(b []byte) (string, bool) {
	for i, c := range b {
		if c == 0 {
			return string(b[:i]), true
		}
	}
	return "", false
}

// below returns path/name, or path when name is "".
func below(path, name string) string {
	if path == "" || name == "" {
		return path
	}
	return path + "/" + name
}
