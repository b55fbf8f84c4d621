package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/image/fetch"
)

// ImageInfo is an image of the daemon's store, as GET /v1/images lists it.
type ImageInfo struct {
	Digest   string    `json:"digest"`
	Refs     []string  `json:"refs"`
	Platform string    `json:"platform"`
	Size     int64     `json:"size"`
	Added    time.Time `json:"added"`
}

// PullBody is the body of POST /v1/images/pull.
type PullBody struct {
	Ref      string `json:"ref"`
	Platform string `json:"platform,omitempty"`
	// InsecureRegistries lists the registries (HOST:PORT) the pull may
	// reach over plain HTTP.
	InsecureRegistries []string `json:"insecure_registries,omitempty"`
}

// pullTick is the least time between two lines of a pull's answer that
// count the bytes fetched.
const pullTick = 250 * time.Millisecond

// PullEvent is a line of POST /v1/images/pull's answer: first the
// image's (its layer count, and in Size the bytes to fetch of the layers
// the store lacks), then each layer's progress (its Size when it starts,
// its unpacked Bytes when done) and lines that count the bytes fetched so
// far, then a last line with the image's digest or the error.
type PullEvent struct {
	Layer  string `json:"layer,omitempty"`
	Index  int    `json:"index,omitempty"`
	Count  int    `json:"count,omitempty"`
	Cached bool   `json:"cached,omitempty"`
	Done   bool   `json:"done,omitempty"`
	Bytes  int64  `json:"bytes,omitempty"`
	Size   int64  `json:"size,omitempty"`
	// Fetched, on lines of its own (a few a second at most), counts the
	// bytes fetched so far.
	Fetched int64      `json:"fetched,omitempty"`
	Digest  string     `json:"digest,omitempty"`
	Error   *ErrorBody `json:"error,omitempty"`
}

// operatorOnly refuses a request that is not the daemon's operator's (the
// unix socket, no token): what it would do acts for every tenant.
func operatorOnly(r *http.Request, what string) error {
	if OriginOf(r.Context()) != OriginLocal || tenantOf(r) != AdminTenant || r.Header.Get("Authorization") != "" {
		return errorf(ErrPermission, "%s: the daemon's operator only, on its unix socket without a token", what)
	}
	return nil
}

// listImages lists the daemon's images (GET /v1/images): what sandboxes
// may start from (policy root image:REF).
func (h *handler) listImages(w http.ResponseWriter, r *http.Request) error {
	imgs, err := h.m.Images().List()
	if err != nil {
		return err
	}
	out := make([]ImageInfo, 0, len(imgs))
	for _, img := range imgs {
		refs := img.Refs
		if refs == nil {
			refs = []string{}
		}
		out = append(out, ImageInfo{Digest: img.Digest, Refs: refs, Platform: img.Platform, Size: img.Size, Added: img.Added})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// removeImage removes a name of an image, or an image by its digest
// (DELETE /v1/images?ref=REF), and the layers no image holds any more
// and no sandbox uses. The operator's only.
func (h *handler) removeImage(w http.ResponseWriter, r *http.Request) error {
	if err := operatorOnly(r, "removing images"); err != nil {
		return err
	}
	ref := r.URL.Query().Get("ref")
	if ref == "" {
		return errorf(daemon.ErrInvalid, "ref: the image to remove is required")
	}
	auditEntry(r).Subject = ref
	st := h.m.Images()
	if err := st.Remove(ref); err != nil {
		if errors.Is(err, image.ErrNotFound) {
			return errorf(daemon.ErrNotFound, "%v", err)
		}
		return err
	}
	if _, err := st.Prune(); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// pullImage pulls an image into the daemon's store (POST
// /v1/images/pull), answering with JSON lines as it goes: a line per
// layer started and done, then one with the digest or the error. The
// operator's only: the daemon reaches a registry on no tenant's word.
func (h *handler) pullImage(w http.ResponseWriter, r *http.Request) error {
	if err := operatorOnly(r, "pulling images"); err != nil {
		return err
	}
	var b PullBody
	if err := decodeBody(w, r, &b, false); err != nil {
		return err
	}
	if _, err := image.Normalize(b.Ref); err != nil {
		return errorf(daemon.ErrInvalid, "ref: %v", err)
	}
	auditEntry(r).Subject = b.Ref
	w.Header().Set("Content-Type", "application/jsonl")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	// Through the wrappers (the status counter, the audit), which unwrap.
	rc := http.NewResponseController(w)
	flush := func() { _ = rc.Flush() }
	opt := fetch.PullOptions{Options: fetch.Options{Root: os.Geteuid() == 0}, Platform: b.Platform, Insecure: b.InsecureRegistries}
	var mu sync.Mutex // the layers' progress and their bytes come from several goroutines
	fetched := false  // a layer was not in the store
	opt.Progress = func(e fetch.Event) {
		mu.Lock()
		defer mu.Unlock()
		fetched = fetched || (e.Done && !e.Cached)
		_ = enc.Encode(PullEvent{Layer: e.Layer, Index: e.Index, Count: e.Count, Cached: e.Cached, Done: e.Done, Bytes: e.Bytes, Size: e.Size})
		flush()
	}
	var total int64
	var told time.Time
	opt.Fetched = func(n int64) {
		mu.Lock()
		defer mu.Unlock()
		total += n
		if now := time.Now(); now.Sub(told) >= pullTick {
			told = now
			_ = enc.Encode(PullEvent{Fetched: total})
			flush()
		}
	}
	img, err := fetch.Pull(r.Context(), h.m.Images(), b.Ref, opt)
	if err != nil {
		_ = enc.Encode(PullEvent{Error: &ErrorBody{Code: CodeInvalid, Message: strings.TrimSpace(err.Error())}})
		flush()
		return nil
	}
	daemon.ImageCache.With("pull", daemon.CacheResult(!fetched)).Inc()
	_ = enc.Encode(PullEvent{Digest: img.Digest})
	flush()
	return nil
}
