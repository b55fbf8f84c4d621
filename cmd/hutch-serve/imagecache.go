package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/hutch-sandbox/hutch/internal/image"
)

// imageCacheEvery is how often hutch serve keeps its image store within
// the store's standing limit: images whose sandboxes have ended since
// the last pull may go.
const imageCacheEvery = time.Minute

// keepImageCache sets the standing size limit of the image store of
// stateDir (hutch serve --image-cache-max: a size, or "none" to remove
// it; "" leaves the store's as it is) and keeps the store within it, now
// and every imageCacheEvery until ctx ends, logging what it removes. The
// returned function waits for it to stop.
func keepImageCache(ctx context.Context, stateDir, flag string, log *slog.Logger) (wait func(), err error) {
	st, err := image.Open(stateDir)
	if err != nil {
		return nil, err
	}
	if flag != "" {
		limit, err := parseLimit(flag)
		if err != nil {
			return nil, err
		}
		if err := st.SetLimit(limit); err != nil {
			return nil, err
		}
	}
	if limit, err := st.Limit(); err != nil {
		return nil, err
	} else if limit > 0 {
		log.Info("image store limit", "max", humanSize(limit), "dir", st.Dir())
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(imageCacheEvery)
		defer t.Stop()
		for {
			removed, err := st.Fit(0)
			for _, img := range removed {
				log.Info("image removed: least recently used, over the store's limit", "digest", img.Digest, "refs", img.Refs)
			}
			if err != nil {
				log.Warn("image store limit", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { <-done }, nil
}

// serveStateDir is hutch serve's state directory when --state-dir does
// not name one: $HUTCH_STATE_DIR, as for hutch image and hutch run, so
// that one variable names the store they share; else defaultStateDir.
func serveStateDir() string {
	if d := os.Getenv("HUTCH_STATE_DIR"); d != "" {
		return d
	}
	return defaultStateDir
}
