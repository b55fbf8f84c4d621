package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/image/fetch"
	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
)

// TestKeepImageCache: hutch serve --image-cache-max sets the store's
// standing limit and keeps the store within it (the least recently used
// image first, never one in use); without the flag the store's limit
// stays; a size that is not one is refused.
func TestKeepImageCache(t *testing.T) {
	state := t.TempDir()
	st, err := image.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = image.RemoveTree(state) })
	var imgs []*image.Image
	for i, tag := range []string{"old", "used", "new"} {
		img := imagetest.Image(t, "amd64", nil, imagetest.Layer(t, imagetest.Tar(t, imagetest.File(tag, strings.Repeat(tag, 40<<10), 0o644))))
		got, err := fetch.Import(st, imagetest.DockerSave(t, img, "hutch.test/cache:"+tag, t.TempDir()), "", fetch.Options{Root: os.Geteuid() == 0})
		if err != nil {
			t.Fatal(err)
		}
		when := time.Now().Add(-time.Duration(3-i) * time.Hour)
		if err := os.Chtimes(filepath.Join(st.Dir(), "records", strings.TrimPrefix(got[0].Digest, "sha256:")+".json"), when, when); err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, got[0])
	}
	usage, err := st.Usage()
	if err != nil {
		t.Fatal(err)
	}
	release, err := st.Use(imgs[1])
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	// Use made "used" the most recent: back to its place, in use still.
	when := time.Now().Add(-2 * time.Hour)
	_ = os.Chtimes(filepath.Join(st.Dir(), "records", strings.TrimPrefix(imgs[1].Digest, "sha256:")+".json"), when, when)

	keep := func(flag string) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // one round, then stop
		wait, err := keepImageCache(ctx, state, flag, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		wait()
	}
	// Room for two of the three: the oldest goes.
	limit := usage * 3 / 4
	keep(strconv.FormatInt(limit, 10))
	if l, err := st.Limit(); err != nil || l != limit {
		t.Errorf("the store's limit: %d, %v; want %d", l, err, limit)
	}
	if _, err := st.Get("hutch.test/cache:old"); err == nil {
		t.Error("the least recently used image stayed over the limit")
	}
	// Room for none: the image in use stays. Without the flag the
	// store's limit holds.
	if err := st.SetLimit(1); err != nil {
		t.Fatal(err)
	}
	keep("")
	if _, err := st.Get("hutch.test/cache:new"); err == nil {
		t.Error("an image not in use stayed over the limit")
	}
	if _, err := st.Get("hutch.test/cache:used"); err != nil {
		t.Errorf("the image in use was removed: %v", err)
	}
	keep("none")
	if l, err := st.Limit(); err != nil || l != 0 {
		t.Errorf("--image-cache-max none: the limit is %d, %v", l, err)
	}
	if _, err := keepImageCache(context.Background(), state, "lots", slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil || !strings.Contains(err.Error(), "lots") {
		t.Errorf("a size that is not one: %v", err)
	}
	var stderr strings.Builder
	if code := cmdServe([]string{"--image-cache-max", "0", "--state-dir", state}, &stderr); code != 2 || !strings.Contains(stderr.String(), "--image-cache-max \"0\"") {
		t.Errorf("hutch serve --image-cache-max 0: exit %d, %s", code, stderr.String())
	}
}

// TestServeStateDir: hutch serve's state directory is --state-dir's, else
// $HUTCH_STATE_DIR's (the one hutch image and hutch run use), else
// /var/lib/hutch.
func TestServeStateDir(t *testing.T) {
	t.Setenv("HUTCH_STATE_DIR", "")
	if d := serveStateDir(); d != defaultStateDir {
		t.Errorf("without HUTCH_STATE_DIR: %s", d)
	}
	t.Setenv("HUTCH_STATE_DIR", "/srv/hutch-state")
	if d := serveStateDir(); d != "/srv/hutch-state" {
		t.Errorf("with HUTCH_STATE_DIR: %s", d)
	}
}
