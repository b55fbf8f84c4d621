package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
)

// TestImages: the operator has the daemon pull an image (progress to the
// callback, then the digest), lists it, removes it; a tenant on TCP lists
// but may neither pull nor remove; a create names an image (the policy's
// root), and a policy that names another root with it is refused.
func TestImages(t *testing.T) {
	ctx := context.Background()
	img := imagetest.Image(t, "amd64", nil, imagetest.Layer(t, imagetest.Tar(t, imagetest.File("hello", "hi\n", 0o644))))
	host, ref := imagetest.Registry(t, img, "sdk/box:1")
	digest, _ := img.Digest()

	op, err := client.New("", "")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := testManager.Store().CreateToken(ctx, "img-tenant")
	if err != nil {
		t.Fatal(err)
	}
	tenant, _ := client.New(testTCP, tok)

	if _, err := tenant.PullImage(ctx, ref, client.PullOptions{InsecureRegistries: []string{host}}); !errors.Is(err, client.ErrPermission) {
		t.Errorf("a tenant pulls: %v", err)
	}
	var events []client.PullEvent
	got, err := op.PullImage(ctx, ref, client.PullOptions{InsecureRegistries: []string{host}, Progress: func(e client.PullEvent) { events = append(events, e) }})
	if err != nil || got != digest.String() {
		t.Fatalf("pull: %q, %v; want %s", got, err, digest)
	}
	// The image's event (its layer count, the bytes to fetch), then the
	// layer's, the last saying it is in the store.
	if len(events) < 3 || events[0].Layer != "" || events[0].Count != 1 || events[0].Size <= 0 ||
		events[1].Layer == "" || !events[len(events)-1].Done {
		t.Errorf("progress %+v", events)
	}
	// A registry reached over plain HTTP without saying so: the daemon's
	// error, as an *Error.
	var ce *client.Error
	if _, err := op.PullImage(ctx, ref, client.PullOptions{}); !errors.As(err, &ce) || !strings.Contains(ce.Message, "--insecure-registry") {
		t.Errorf("pull over plain HTTP not named: %v", err)
	}

	for _, c := range []*client.Client{op, tenant} {
		list, err := c.Images(ctx)
		if err != nil || len(list) != 1 || list[0].Digest != digest.String() || list[0].Refs[0] != ref || list[0].Platform != "linux/amd64" {
			t.Errorf("images: %+v, %v", list, err)
		}
	}

	if _, err := tenant.Create(ctx, client.CreateOptions{Image: ref}); err != nil {
		t.Fatal(err)
	}
	if root := testManager.LastCreate().Policy.Root; root != "image:"+ref {
		t.Errorf("the create's root: %q", root)
	}
	if _, err := op.Create(ctx, client.CreateOptions{Image: ref, Policy: []byte(`{"network":{"mode":"none"},"root":"image:` + ref + `"}`)}); err != nil {
		t.Errorf("the image and the same root: %v", err)
	}
	if req := testManager.LastCreate(); req.Policy.Root != "image:"+ref || req.Policy.Network.Mode != "none" {
		t.Errorf("the create's policy: %+v", req.Policy)
	}
	if _, err := op.Create(ctx, client.CreateOptions{Image: ref, Policy: []byte(`{"root":"host"}`)}); err == nil || !strings.Contains(err.Error(), "give one of them") {
		t.Errorf("the image and another root: %v", err)
	}

	if err := tenant.RemoveImage(ctx, ref); !errors.Is(err, client.ErrPermission) {
		t.Errorf("a tenant removes: %v", err)
	}
	if err := op.RemoveImage(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if err := op.RemoveImage(ctx, ref); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("removing it again: %v", err)
	}
	if list, err := op.Images(ctx); err != nil || len(list) != 0 {
		t.Errorf("images after rm: %+v, %v", list, err)
	}
}
