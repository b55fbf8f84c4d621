package fetch

import "github.com/hutch-sandbox/hutch/internal/metrics"

// What bringing images in costs, for hutch serve's /metrics (the daemon's
// pulls; `hutch image` in another process counts in its own).
var (
	// Layers counts the layers of images brought in, by result:
	// "unpacked", "cached" (in the store already) or "refused".
	Layers = metrics.NewCounter("hutch_image_layers_total",
		"Layers of images brought into the store, by result (unpacked, cached, refused).", "result")
	// Bytes counts the uncompressed bytes of the layers unpacked.
	Bytes = metrics.NewCounter("hutch_image_unpacked_bytes_total",
		"Uncompressed bytes of the image layers unpacked.")
	// UnpackSeconds is how long fetching and unpacking a layer took.
	UnpackSeconds = metrics.NewHistogram("hutch_image_layer_seconds",
		"Duration of fetching and unpacking an image layer.", metrics.DefaultBuckets)
)
