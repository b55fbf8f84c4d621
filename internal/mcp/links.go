package mcp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Link bounds.
const (
	// LinkTTL is how long a published link stays valid.
	LinkTTL = 30 * time.Minute
	// MaxLinks is how many links one owner has at once: publishing one
	// more forgets the owner's oldest (never another owner's).
	MaxLinks = 4096
)

// Links publishes content at capability URLs (an unguessable token as
// the path's last element) for LinkTTL: what a tool result links to
// instead of carrying it, fetched by the client over plain HTTP. It is an
// http.Handler serving GET and HEAD of those URLs; whoever holds a URL may
// fetch it, so a link is published only to the caller who may read it.
type Links struct {
	mu    sync.Mutex
	links map[string]*link
	order map[string][]string // tokens by owner, oldest first
	now   func() time.Time
}

type link struct {
	name, mime string
	size       int64
	write      func(ctx context.Context, w io.Writer) error
	expires    time.Time
}

// NewLinks returns an empty set of links.
func NewLinks() *Links {
	return &Links{links: map[string]*link{}, order: map[string][]string{}, now: time.Now}
}

// Publish makes what write writes (size bytes, -1 when unknown, of type
// mimeType, named name for a download) reachable at the URL it returns:
// base (which ends in "/") followed by a new token. write is called once
// per fetch, with the request's context. The link is owner's, whose
// MaxLinks are kept.
func (l *Links) Publish(owner, base, name, mimeType string, size int64, write func(ctx context.Context, w io.Writer) error) (string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("publish %s: %w", name, err)
	}
	tok := hex.EncodeToString(b[:])
	if mimeType == "" {
		mimeType = "application/octet-stream"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expire()
	order := l.order[owner]
	for len(order) >= MaxLinks {
		delete(l.links, order[0])
		order = order[1:]
	}
	l.links[tok] = &link{name: name, mime: mimeType, size: size, write: write, expires: l.now().Add(LinkTTL)}
	l.order[owner] = append(order, tok)
	return base + tok, nil
}

// expire forgets the links whose time is over; l.mu is held.
func (l *Links) expire() {
	now := l.now()
	for owner, order := range l.order {
		n := 0
		for n < len(order) && !now.Before(l.links[order[n]].expires) {
			delete(l.links, order[n])
			n++
		}
		if n == len(order) {
			delete(l.order, owner)
		} else {
			l.order[owner] = order[n:]
		}
	}
}

func (l *Links) get(tok string) *link {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expire()
	return l.links[tok]
}

// ServeHTTP serves a published link: its content, or 404 once it expired
// or was never published.
func (l *Links) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	tok := path.Base(r.URL.Path)
	lk := l.get(tok)
	if lk == nil || strings.Trim(tok, "0123456789abcdef") != "" {
		http.Error(w, "no such link (links expire after "+LinkTTL.String()+")", http.StatusNotFound)
		return
	}
	h := w.Header()
	h.Set("Content-Type", lk.mime)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if lk.name != "" {
		h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": lk.name}))
	}
	if lk.size >= 0 {
		h.Set("Content-Length", strconv.FormatInt(lk.size, 10))
	}
	if r.Method == http.MethodHead {
		return
	}
	// Once the body started, a failure can only cut it short: the
	// length the header promised tells the client. One before the first
	// byte (the file's sandbox ended, the file is gone) is an error
	// status instead of an empty body.
	body := &started{w: w}
	if err := lk.write(r.Context(), body); err != nil && !body.n {
		h.Del("Content-Length")
		h.Del("Content-Disposition")
		http.Error(w, "the link's content is gone: "+err.Error(), http.StatusNotFound)
	}
}

// started is a response body that notes whether a byte was written.
type started struct {
	w io.Writer
	n bool
}

func (s *started) Write(p []byte) (int, error) {
	s.n = s.n || len(p) > 0
	return s.w.Write(p)
}
