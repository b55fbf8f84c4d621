package sandbox

import "errors"

// ErrLayerTooLarge is wrapped by the error of a SnapshotLayer whose
// contents pass its limit.
var ErrLayerTooLarge = errors.New("the layer is larger than allowed")

// Snapshot is what SnapshotLayer made.
type Snapshot struct {
	// Digest names the layer by its contents ("sha256:…", see
	// SnapshotLayer).
	Digest string
	// Size is the bytes of its regular files (a file with several links
	// counted once).
	Size int64
}
