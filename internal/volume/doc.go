// Package volume is the store of hutch serve's persistent volumes (E2B's
// volumes): named, per tenant, each an ext4 filesystem in a sparse image
// file whose size is the volume's quota.
//
// A Store keeps, in its directory (DIR/volumes of the daemon's state):
//
//   - index.json: every volume's tenant, name, id and creation time;
//   - ID.img: each volume's image, made with mkfs.ext4;
//   - token.key: the key its volume tokens are derived from (Token);
//   - mnt/ID: where each image is mounted (nosuid, nodev), through a loop
//     device configured with LO_FLAGS_AUTOCLEAR, so that unmounting frees
//     it.
//
// What users and sandboxes see of a volume is its image's directory data
// (Dir), never the filesystem's root (lost+found). Open mounts every
// volume that is not mounted yet and reuses a mount a previous daemon left
// (mountinfo says whether one is, and the loop device's backing file
// whose image it is), and tries one that fails again when it is used;
// Close leaves the mounts, which sandboxes may still
// use, for the next daemon to reuse. Delete unmounts and removes a volume
// no sandbox uses.
//
// Root (content.go) reads and changes the files of a volume for E2B's
// content API: every path is resolved inside the volume with openat2
// (RESOLVE_BENEATH, RESOLVE_NO_MAGICLINKS), since sandboxes write what is
// in it.
package volume
