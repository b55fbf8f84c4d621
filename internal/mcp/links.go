package mcp

import (
	"net/http"
	"sync"
)

// Links publishes content at capability URLs (an unguessable token in the
// path) for a while: what a tool result links to instead of carrying it.
// It is an http.Handler serving those URLs.
type Links struct {
	mu sync.Mutex
}

// NewLinks returns an empty set of links.
func NewLinks() *Links { return &Links{} }

// ServeHTTP serves a published link.
func (l *Links) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	http.NotFound(w, r)
}
