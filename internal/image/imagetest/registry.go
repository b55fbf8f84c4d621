package imagetest

import (
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Registry starts a registry on loopback, over plain HTTP, for the
// test's life, and pushes img to it as repo (with its tag, e.g.
// "team/box:1"); it returns the registry's HOST:PORT (for
// --insecure-registry) and the image's reference there.
func Registry(t testing.TB, img v1.Image, repo string) (host, ref string) {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host = strings.TrimPrefix(srv.URL, "http://")
	ref = host + "/" + repo
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	return host, ref
}
