package fetch

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/hutch-sandbox/hutch/internal/image"
	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
)

// testRegistry is go-containerregistry's registry on loopback, over TLS
// (or plain HTTP), with basic auth when user is set.
type testRegistry struct {
	srv        *httptest.Server
	host       string
	user, pass string
	// tamper, when set, changes the blob of that digest as it is served.
	tamper string
}

func newRegistry(t *testing.T, tls bool, user, pass string) *testRegistry {
	t.Helper()
	r := &testRegistry{user: user, pass: pass}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.user != "" {
			u, p, ok := req.BasicAuth()
			if !ok || u != r.user || p != r.pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="hutch-test"`)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
		}
		if r.tamper != "" && req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/blobs/"+r.tamper) {
			rec := httptest.NewRecorder()
			reg.ServeHTTP(rec, req)
			b := rec.Body.Bytes()
			if len(b) > 20 {
				b[len(b)/2] ^= 0xff
			}
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			w.Write(b)
			return
		}
		reg.ServeHTTP(w, req)
	})
	if tls {
		r.srv = httptest.NewTLSServer(h)
	} else {
		r.srv = httptest.NewServer(h)
	}
	t.Cleanup(r.srv.Close)
	r.host = strings.TrimPrefix(strings.TrimPrefix(r.srv.URL, "https://"), "http://")
	return r
}

// push puts img (or an index) at repo:tag on the registry.
func (r *testRegistry) push(t *testing.T, repoTag string, img v1.Image) string {
	t.Helper()
	ref, err := name.ParseReference(r.host+"/"+repoTag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, r.opts()...); err != nil {
		t.Fatal(err)
	}
	return ref.String()
}

func (r *testRegistry) opts() []remote.Option {
	o := []remote.Option{remote.WithTransport(r.srv.Client().Transport)}
	if r.user != "" {
		o = append(o, remote.WithAuth(&authn.Basic{Username: r.user, Password: r.pass}))
	}
	return o
}

// pullOpts are options that trust the registry's certificate and read no
// credentials of the machine's.
func (r *testRegistry) pullOpts(t *testing.T) PullOptions {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("DOCKER_CONFIG", "")
	t.Setenv("REGISTRY_AUTH_FILE", "")
	t.Setenv("XDG_RUNTIME_DIR", "")
	return PullOptions{Options: opts(), Transport: r.srv.Client().Transport}
}

// TestPullAuth: an image comes from a registry over TLS with the
// credentials of --registry-auth (a Docker configuration file); without
// them the registry's refusal is the error.
func TestPullAuth(t *testing.T) {
	r := newRegistry(t, true, "agent", "s3cret")
	ref := r.push(t, "team/box:1", testImage(t))
	s := newStore(t)
	o := r.pullOpts(t)
	if _, err := Pull(context.Background(), s, ref, o); err == nil || !strings.Contains(err.Error(), "401") && !strings.Contains(strings.ToLower(err.Error()), "unauthorized") {
		t.Errorf("without credentials: %v", err)
	}
	auth := filepath.Join(t.TempDir(), "config.json")
	cfg := fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, r.host, base64.StdEncoding.EncodeToString([]byte("agent:s3cret")))
	if err := os.WriteFile(auth, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	o.AuthFile = auth
	img, err := Pull(context.Background(), s, ref, o)
	if err != nil {
		t.Fatal(err)
	}
	checkImage(t, s, ref)
	if want, _ := image.Normalize(ref); len(img.Refs) != 1 || img.Refs[0] != want {
		t.Errorf("refs %v", img.Refs)
	}
	// By digest too, from the store's cache: nothing is unpacked again.
	unpacked := 0
	o.Progress = func(e Event) {
		if e.Done && !e.Cached {
			unpacked++
		}
	}
	if _, err := Pull(context.Background(), s, r.host+"/team/box@"+img.Digest, o); err != nil || unpacked != 0 {
		t.Errorf("by digest: %v, %d layers unpacked again", err, unpacked)
	}
}

// TestPullPlainHTTP: a registry that speaks plain HTTP, even on loopback,
// is refused unless named with --insecure-registry.
func TestPullPlainHTTP(t *testing.T) {
	r := newRegistry(t, false, "", "")
	ref := r.push(t, "box:1", testImage(t))
	s := newStore(t)
	o := r.pullOpts(t)
	if _, err := Pull(context.Background(), s, ref, o); err == nil || !strings.Contains(err.Error(), "--insecure-registry "+r.host) {
		t.Errorf("plain HTTP not named: %v", err)
	}
	o.Insecure = []string{r.host}
	if _, err := Pull(context.Background(), s, ref, o); err != nil {
		t.Fatal(err)
	}
	checkImage(t, s, ref)
}

// TestPullIndex: from a multi-platform index, this machine's platform is
// taken, or the one --platform names.
func TestPullIndex(t *testing.T) {
	r := newRegistry(t, true, "", "")
	archImage := func(arch string) v1.Image {
		return imagetest.Image(t, arch, nil, layerOf(t, tarOf(t, "arch="+arch)))
	}
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: archImage("amd64"), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: archImage("arm64"), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}}},
		mutate.IndexAddendum{Add: archImage("riscv64"), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "riscv64"}}},
	)
	ref, err := name.ParseReference(r.host+"/multi:1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx, r.opts()...); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ platform, want string }{{"", runtime.GOARCH}, {"linux/riscv64", "riscv64"}} {
		s := newStore(t)
		o := r.pullOpts(t)
		o.Platform = c.platform
		img, err := Pull(context.Background(), s, ref.String(), o)
		if err != nil {
			t.Fatal(err)
		}
		d, _ := s.LayerDir(img.Layers[0])
		if b, _ := os.ReadFile(filepath.Join(d, "arch")); string(b) != c.want || !strings.HasSuffix(img.Platform, c.want) {
			t.Errorf("platform %q: got the %s image (%s)", c.platform, b, img.Platform)
		}
	}
}

// TestPullTampered: a blob that is not what its digest says is refused,
// and nothing of the image is kept.
func TestPullTampered(t *testing.T) {
	r := newRegistry(t, true, "", "")
	img := testImage(t)
	ref := r.push(t, "box:1", img)
	ls, _ := img.Layers()
	d, _ := ls[0].Digest()
	r.tamper = d.String()
	s := newStore(t)
	if _, err := Pull(context.Background(), s, ref, r.pullOpts(t)); err == nil {
		t.Fatal("a tampered layer was taken")
	} else if !strings.Contains(err.Error(), "layer sha256:") {
		t.Errorf("the error names no layer: %v", err)
	}
	cf, _ := img.ConfigFile()
	assertRefused(t, s, cf.RootFS.DiffIDs[0].String())
}
