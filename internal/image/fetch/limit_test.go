package fetch

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
)

// lruStore imports one single-layer image of 64 KiB per tag, each
// hutch.test/lru:TAG, and returns the store, the images by tag and the
// disk space one layer takes.
func lruStore(t *testing.T, tags ...string) (*image.Store, map[string]*image.Image, int64) {
	t.Helper()
	s := newStore(t)
	imgs := map[string]*image.Image{}
	for _, tag := range tags {
		imgs[tag] = importLRU(t, s, tag, opts())
	}
	total, err := s.Usage()
	if err != nil {
		t.Fatal(err)
	}
	return s, imgs, total / int64(len(tags))
}

// importLRU imports hutch.test/lru:TAG, a layer of one 64 KiB file.
func importLRU(t *testing.T, s *image.Store, tag string, o Options) *image.Image {
	t.Helper()
	img := imagetest.Image(t, "amd64", nil, layerOf(t, tarOf(t, tag+"="+strings.Repeat(tag, 64<<10))))
	rec, err := Import(s, dockerSave(t, img, "hutch.test/lru:"+tag), "", o)
	if err != nil {
		t.Fatal(err)
	}
	return rec[0]
}

// usedAgo sets img's last use to ago before now.
func usedAgo(t *testing.T, s *image.Store, img *image.Image, ago time.Duration) {
	t.Helper()
	when := time.Now().Add(-ago)
	if err := os.Chtimes(filepath.Join(s.Dir(), "records", strings.TrimPrefix(img.Digest, "sha256:")+".json"), when, when); err != nil {
		t.Fatal(err)
	}
}

func digests(imgs []*image.Image) []string {
	var out []string
	for _, img := range imgs {
		out = append(out, img.Digest)
	}
	return out
}

// TestStandingLimit: with the store's standing limit set, bringing an
// image in evicts the least recently used images until the layers fit —
// never one a sandbox uses, never the image just brought in, never one
// used in the last minute (a sandbox in another process may be about to
// stack it) — and an explicit Evict spares only the images in use.
func TestStandingLimit(t *testing.T) {
	s, imgs, per := lruStore(t, "a", "b", "c")
	if l, err := s.Limit(); err != nil || l != 0 {
		t.Fatalf("a new store's limit: %d, %v", l, err)
	}
	// Nothing happens without a limit.
	if removed, err := s.Fit(0); err != nil || len(removed) != 0 {
		t.Fatalf("Fit without a limit: %v, %v", removed, err)
	}
	// b is in use, and the least recently used; a was used before c.
	release, err := s.Use(imgs["b"])
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	usedAgo(t, s, imgs["b"], 4*time.Hour)
	usedAgo(t, s, imgs["a"], 3*time.Hour)
	usedAgo(t, s, imgs["c"], 2*time.Hour)
	// Room for two layers and a half: d comes in, a and c go.
	limit := 2*per + per/2
	if err := s.SetLimit(limit); err != nil {
		t.Fatal(err)
	}
	if l, err := s.Limit(); err != nil || l != limit {
		t.Fatalf("limit: %d, %v; want %d", l, err, limit)
	}
	var evicted []*image.Image
	o := opts()
	o.Evicted = func(img *image.Image) { evicted = append(evicted, img) }
	d := importLRU(t, s, "d", o)
	if got, want := digests(evicted), []string{imgs["a"].Digest, imgs["c"].Digest}; !slices.Equal(got, want) {
		t.Errorf("evicted %v, want a then c %v", got, want)
	}
	if len(evicted) > 0 && !slices.Equal(evicted[0].Refs, []string{"hutch.test/lru:a"}) {
		t.Errorf("the evicted image's names: %v", evicted[0].Refs)
	}
	for _, tag := range []string{"b", "d"} {
		if _, err := s.Get("hutch.test/lru:" + tag); err != nil {
			t.Errorf("%s was evicted: %v", tag, err)
		}
	}
	if u, err := s.Usage(); err != nil || u > limit {
		t.Errorf("after the import the layers take %d bytes, limit %d (%v)", u, limit, err)
	}
	// A limit given to the import (--max-size) wins over the store's; the
	// image brought in stays though it alone is over it, and d, brought
	// in a moment ago, stays too.
	evicted = nil
	o.MaxBytes = 1
	e := importLRU(t, s, "e", o)
	if len(evicted) != 0 {
		t.Errorf("evicted %v: the image just imported, one in use or one used a moment ago", digests(evicted))
	}
	// An explicit eviction spares only what is in use.
	removed, err := s.Evict(0)
	if got := digests(removed); err != nil || !slices.Contains(got, d.Digest) || !slices.Contains(got, e.Digest) || len(got) != 2 {
		t.Errorf("Evict(0) removed %v (%v), want d and e", got, err)
	}
	if _, err := s.Get("hutch.test/lru:b"); err != nil {
		t.Errorf("the image in use was evicted: %v", err)
	}
	// The removed layers' recorded sizes go with them.
	sizes, _ := filepath.Glob(filepath.Join(s.Dir(), "layers", "sha256", "*.size"))
	if len(sizes) != 1 {
		t.Errorf("size records left: %v", sizes)
	}
	if err := s.SetLimit(0); err != nil {
		t.Fatal(err)
	}
	if l, err := s.Limit(); err != nil || l != 0 {
		t.Errorf("the limit after removing it: %d, %v", l, err)
	}
	if err := s.SetLimit(-1); err == nil {
		t.Error("a negative limit was taken")
	}
}

// TestUseIsRecent: starting a sandbox from an image (Use) makes it the
// most recently used, whenever it was pulled.
func TestUseIsRecent(t *testing.T) {
	s, imgs, per := lruStore(t, "x", "y")
	usedAgo(t, s, imgs["x"], 2*time.Hour)
	usedAgo(t, s, imgs["y"], time.Hour)
	release, err := s.Use(imgs["x"])
	if err != nil {
		t.Fatal(err)
	}
	release()
	removed, err := s.Evict(per + per/2)
	if got := digests(removed); err != nil || !slices.Equal(got, []string{imgs["y"].Digest}) {
		t.Errorf("evicted %v (%v), want y, the image not used since", got, err)
	}
}

// TestBadLimit: a limit file that is not one is an error naming it.
func TestBadLimit(t *testing.T) {
	s := newStore(t)
	if err := os.WriteFile(filepath.Join(s.Dir(), "limit.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Limit(); err == nil || !strings.Contains(err.Error(), "limit.json") {
		t.Errorf("a broken limit file: %v", err)
	}
}
