package api

import (
	"bytes"
	"net/http"
	"slices"

	"github.com/hutch-sandbox/hutch/internal/changes"
	"github.com/hutch-sandbox/hutch/internal/daemon"
)

// DiffResponse answers GET /v1/sandboxes/{id}/diff?format=json.
type DiffResponse struct {
	// Against is the other root: "base", a snapshot's or a sandbox's id.
	Against string               `json:"against"`
	Changes []DiffChange         `json:"changes"`
	Counts  map[changes.Kind]int `json:"counts"`
}

// DiffChange is one changed path of a diff.
type DiffChange struct {
	Kind changes.Kind `json:"kind"`
	// Path is relative to the root (no leading slash); From is a
	// rename's old path.
	Path string `json:"path"`
	From string `json:"from,omitempty"`
	// Old and New are the entry in the other root and in the sandbox's
	// (absent when added or deleted).
	Old *changes.Entry `json:"old,omitempty"`
	New *changes.Entry `json:"new,omitempty"`
}

// maxDiff bounds a diff's answer in the text formats.
const maxDiff = 64 << 20

// cappedBuffer is a buffer that keeps at most max bytes; over says more
// were written.
type cappedBuffer struct {
	bytes.Buffer
	max  int
	over bool
}

// Write keeps p while the buffer holds at most max bytes.
func (b *cappedBuffer) Write(p []byte) (int, error) {
	if b.over || b.Len()+len(p) > b.max {
		b.over = true
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

// diffFormats are the formats of GET /v1/sandboxes/{id}/diff.
var diffFormats = []string{"patch", "stat", "names", "json", "export"}

// diffFormat is the request's ?format= of a diff (patch when none).
func diffFormat(r *http.Request) (string, error) {
	format := r.URL.Query().Get("format")
	if format == "" {
		format = "patch"
	}
	if !slices.Contains(diffFormats, format) {
		return "", errorf(daemon.ErrInvalid, "format %q: want one of patch, stat, names, json, export", format)
	}
	return format, nil
}

// diff answers GET /v1/sandboxes/{id}/diff: what the sandbox changed in
// its root against ?against= ("base" when empty, a snapshot or a
// sandbox), as ?format= patch (the default: a unified diff with git's
// headers, binary and large files summarised), stat, names, json, or
// export (a patch git apply takes), of the paths ?path= names (all when
// none).
func (h *handler) diff(w http.ResponseWriter, r *http.Request) error {
	format, err := diffFormat(r)
	if err != nil {
		return err
	}
	s, err := h.snapshotter()
	if err != nil {
		return err
	}
	d, err := s.Diff(r.Context(), tenantOf(r), r.PathValue("id"), r.URL.Query().Get("against"))
	if err != nil {
		return err
	}
	defer d.Close()
	return writeChanges(w, r, d.Against, d.Sides, d.Changes, format)
}

// writeChanges answers a diff request with all (those at or below the
// request's ?path= values) in format, read through sides; against names
// the other side.
func writeChanges(w http.ResponseWriter, r *http.Request, against string, sides changes.Sides, all []changes.Change, format string) error {
	list, err := changes.Filter(all, r.URL.Query()["path"])
	if err != nil {
		return errorf(daemon.ErrInvalid, "%v", err)
	}
	if format == "json" {
		out := DiffResponse{Against: against, Changes: make([]DiffChange, 0, len(list)), Counts: changes.Count(list)}
		for _, c := range list {
			dc := DiffChange{Kind: c.Kind, Path: c.Path, From: c.From}
			if c.Kind == changes.Renamed {
				dc.Old = &c.FromOld
			} else if c.Old.Type != changes.Absent {
				dc.Old = &c.Old
			}
			if c.New.Type != changes.Absent {
				dc.New = &c.New
			}
			out.Changes = append(out.Changes, dc)
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	// Written whole before the answer, so that a file the diff cannot
	// read is an error status, not a cut-off patch; bounded.
	buf := &cappedBuffer{max: maxDiff}
	switch format {
	case "patch":
		err = sides.WriteDiff(buf, list, changes.ShowOptions{})
	case "stat":
		err = sides.WriteStat(buf, list, false)
	case "names":
		changes.WriteNames(buf, list)
	case "export":
		_, err = sides.Export(buf, list)
	}
	if buf.over {
		return errorf(daemon.ErrInvalid, "the diff is larger than %d MiB: ask for its stat or names, or for some paths", maxDiff>>20)
	}
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Hutch-Against", against)
	w.WriteHeader(http.StatusOK)
	w.Write(buf.Bytes())
	return nil
}
