package mcp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestLinkGone: a link whose content fails before its first byte (its
// sandbox ended) answers 404 saying so, not an empty 200; one that fails
// after some bytes is cut short; an empty content is an empty 200.
func TestLinkGone(t *testing.T) {
	l := NewLinks()
	srv := httptest.NewServer(l)
	defer srv.Close()
	base := srv.URL + "/"
	gone, _ := l.Publish("o", base, "f", "", -1, func(context.Context, io.Writer) error { return errors.New("no such sandbox") })
	cut, _ := l.Publish("o", base, "f", "", 10, func(_ context.Context, w io.Writer) error {
		_, _ = w.Write([]byte("abc"))
		return errors.New("agent gone")
	})
	empty, _ := l.Publish("o", base, "f", "", 0, func(context.Context, io.Writer) error { return nil })
	for _, c := range []struct {
		url, body string
		status    int
		readErr   bool
	}{
		{gone, "the link's content is gone: no such sandbox", http.StatusNotFound, false},
		{cut, "abc", http.StatusOK, true},
		{empty, "", http.StatusOK, false},
	} {
		resp, err := http.Get(c.url)
		if err != nil {
			t.Fatal(err)
		}
		b, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || strings.TrimSpace(string(b)) != c.body || (rerr != nil) != c.readErr {
			t.Errorf("%s: %d %q (read error %v), want %d %q (read error %v)", c.url, resp.StatusCode, b, rerr, c.status, c.body, c.readErr)
		}
	}
}
