package api

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/daemon"
	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
)

// TestImages: the daemon's operator pulls an image into its store through
// the API (progress, then the digest, as JSON lines) and removes it; any
// tenant lists the images; a tenant may neither pull nor remove (the
// daemon reaches a registry on no tenant's word).
func TestImages(t *testing.T) {
	t.Parallel()
	img := imagetest.Image(t, "amd64", nil, imagetest.Layer(t, imagetest.Tar(t, imagetest.File("hello", "hi\n", 0o644))))
	host, ref := imagetest.Registry(t, img, "team/box:1")
	digest, _ := img.Digest()

	e := newEnv(t, Config{}, OriginLocal)
	tok, err := e.m.Store().CreateToken(context.Background(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	body := `{"ref":"` + ref + `","insecure_registries":["` + host + `"]}`
	resp, data := e.request(t, "POST", "/v1/images/pull", body, "Authorization", "Bearer "+tok)
	want(t, resp, data, 403, CodePermissionDenied, "operator")

	resp, data = e.request(t, "POST", "/v1/images/pull", body)
	want(t, resp, data, 200, "")
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	var last PullEvent
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Digest != digest.String() {
		t.Fatalf("the pull's last line %q (%v), want the digest %s", lines[len(lines)-1], err, digest)
	}
	if len(lines) < 2 {
		t.Errorf("no progress before the digest: %s", data)
	}

	// The operator's /metrics counts what pulls brought in.
	resp, data = e.request(t, "GET", "/metrics", "")
	want(t, resp, data, 200, "")
	for _, m := range []string{`hutch_image_layers_total{result="unpacked"} `, "hutch_image_unpacked_bytes_total ", "hutch_image_layer_seconds_count ",
		`hutch_image_cache_total{op="pull",result="miss"} `, `hutch_image_cache_total{op="create",result="hit"} `} {
		if !strings.Contains(string(data), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	// A second pull finds every layer in the store: a hit.
	hits := daemon.ImageCache.With("pull", "hit").Value()
	resp, data = e.request(t, "POST", "/v1/images/pull", body)
	want(t, resp, data, 200, "")
	if !strings.Contains(string(data), `"cached":true`) || daemon.ImageCache.With("pull", "hit").Value() != hits+1 {
		t.Errorf("a pull of an image in the store: %s; hits %v → %v", data, hits, daemon.ImageCache.With("pull", "hit").Value())
	}

	resp, data = e.request(t, "GET", "/v1/images", "", "Authorization", "Bearer "+tok)
	want(t, resp, data, 200, "")
	var list []ImageInfo
	if err := json.Unmarshal(data, &list); err != nil || len(list) != 1 || list[0].Digest != digest.String() || list[0].Refs[0] != ref {
		t.Errorf("list: %s (%v)", data, err)
	}

	resp, data = e.request(t, "DELETE", "/v1/images?ref="+ref, "", "Authorization", "Bearer "+tok)
	want(t, resp, data, 403, CodePermissionDenied)
	resp, data = e.request(t, "DELETE", "/v1/images?ref="+ref, "")
	want(t, resp, data, 204, "")
	resp, data = e.request(t, "DELETE", "/v1/images?ref="+ref, "")
	want(t, resp, data, 404, CodeNotFound)
	resp, data = e.request(t, "GET", "/v1/images", "")
	if resp.StatusCode != 200 || strings.TrimSpace(string(data)) != "[]" {
		t.Errorf("after rm: %s", data)
	}

	// A plain-HTTP registry not named, and a bad reference.
	resp, data = e.request(t, "POST", "/v1/images/pull", `{"ref":"`+ref+`"}`)
	if resp.StatusCode != 200 || !strings.Contains(string(data), "--insecure-registry") {
		t.Errorf("plain HTTP not named: %d %s", resp.StatusCode, data)
	}
	resp, data = e.request(t, "POST", "/v1/images/pull", `{"ref":"UPPER/case"}`)
	want(t, resp, data, 400, CodeInvalid)
}
