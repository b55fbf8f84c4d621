package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/image/fetch"
)

// TestMeterLines: the progress line says what is brought in until its
// manifest is read, then the layers done of the image's and the bytes
// fetched of those to fetch (or read, for an import, whose total is not
// known); it never outgrows an 80-column line off a terminal's size; the
// image's last line has its layers, those in the store and its digest.
func TestMeterLines(t *testing.T) {
	out, err := os.CreateTemp(t.TempDir(), "term")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	m := &meter{term: out, verb: "pulling", name: "hutch.test/box:1"}
	now := time.Now()
	if got := m.line(now); got != "pulling hutch.test/box:1 ..." {
		t.Errorf("before the manifest: %q", got)
	}
	digest := "sha256:" + strings.Repeat("ab", 32)
	m.event(fetch.Event{Image: digest, Count: 3, Size: 2048})
	m.fetched.Add(1024)
	m.event(fetch.Event{Image: digest, Layer: "sha256:1", Index: 1, Count: 3, Done: true, Cached: true})
	if got := m.line(now); got != "pulling hutch.test/box:1: 1/3 layers, 1.0 KiB/2.0 KiB" {
		t.Errorf("under way: %q", got)
	}
	m.event(fetch.Event{Image: digest, Layer: "sha256:2", Index: 2, Count: 3, Done: true})
	m.event(fetch.Event{Image: digest, Layer: "sha256:3", Index: 3, Count: 3, Done: true})
	m.draw()
	m.finishImage(true)
	b, _ := os.ReadFile(out.Name())
	shown := string(b)
	if !strings.Contains(shown, "\rpulling hutch.test/box:1: 3/3 layers, 1.0 KiB/2.0 KiB") ||
		!strings.Contains(shown, "pulled hutch.test/box:1: 3 layers (1 in the store), 1.0 KiB in ") || !strings.HasSuffix(shown, ": "+digest+"\n") {
		t.Errorf("the terminal showed %q", shown)
	}

	imp := &meter{term: out, verb: "importing", name: strings.Repeat("long/", 30) + "app.tar"}
	imp.event(fetch.Event{Image: digest, Count: 1})
	imp.fetched.Add(3 << 20)
	if got := imp.line(now); !strings.HasSuffix(got, ": 0/1 layers, 3.0 MiB read") {
		t.Errorf("an import: %q", got)
	}
	imp.draw()
	if imp.width != 79 {
		t.Errorf("a line of %d columns off a terminal's size, want 79", imp.width)
	}
}
