// Package layer unpacks an image layer — a tar stream from whoever pushed
// the image — into a directory that overlayfs stacks read-only under
// sandboxes, and treats every byte of it as hostile.
//
// Nothing is ever written outside the layer's directory: every entry's
// parent is opened below the layer's root with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV), so an entry with "..", an
// absolute name, a symbolic link in its path (planted by an earlier entry)
// or a hard link that points out is refused, never followed; entries are
// made with the *at calls that do not follow a final symbolic link.
// Device nodes are never created (whiteouts aside, see below), set-id bits
// and file capabilities are stripped, and the whole layer is bounded: its
// uncompressed bytes (a decompression bomb stops there), its entries and
// its names. A layer that breaks a rule gets an error that names the entry;
// what was unpacked of it is the caller's to remove.
//
// Whiteouts are honoured as overlayfs reads them: ".wh.NAME" becomes a
// character device 0/0 named NAME (which the kernel lets anyone make), and
// ".wh..wh..opq" marks its directory opaque with an extended attribute;
// no ".wh." name is ever made.
package layer
