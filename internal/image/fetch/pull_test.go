package fetch

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
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
// (or plain HTTP), with basic auth when user is set, or bearer tokens
// when token is, and a count of the blobs it served.
type testRegistry struct {
	srv        *httptest.Server
	host       string
	user, pass string
	// token, when set, is the bearer token every request must carry,
	// handed out at /token (the realm its 401s name) for the credentials
	// user and pass, as Docker Hub's and most registries' token servers do.
	token string
	// tamper, when set, changes the blob of that digest as it is served.
	tamper string

	mu       sync.Mutex
	blobGets map[string]int // digest → GETs
}

func newRegistry(t *testing.T, tls bool, user, pass string) *testRegistry {
	t.Helper()
	return startRegistry(t, tls, &testRegistry{user: user, pass: pass})
}

// startRegistry serves r.
func startRegistry(t *testing.T, tls bool, r *testRegistry) *testRegistry {
	t.Helper()
	r.blobGets = map[string]int{}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/token" {
			if u, p, ok := req.BasicAuth(); !ok || u != r.user || p != r.pass {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"token": %q}`, r.token)
			return
		}
		switch {
		case r.token != "":
			if req.Header.Get("Authorization") != "Bearer "+r.token {
				w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="%s/token",service="hutch-test"`, r.srv.URL))
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
		case r.user != "":
			u, p, ok := req.BasicAuth()
			if !ok || u != r.user || p != r.pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="hutch-test"`)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
		}
		if _, blob, ok := strings.Cut(req.URL.Path, "/blobs/"); ok && req.Method == http.MethodGet {
			r.mu.Lock()
			r.blobGets[blob]++
			r.mu.Unlock()
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

// gets returns how many times each blob was fetched, and forgets.
func (r *testRegistry) gets() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.blobGets
	r.blobGets = map[string]int{}
	return g
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

// TestPullTampered: a blob that is not what its digest says is refused
// with an error naming the image and the layer, and nothing of the image
// is kept.
func TestPullTampered(t *testing.T) {
	r := newRegistry(t, true, "", "")
	img := testImage(t)
	ref := r.push(t, "box:1", img)
	ls, _ := img.Layers()
	d, _ := ls[0].Digest()
	r.tamper = d.String()
	s := newStore(t)
	cf, _ := img.ConfigFile()
	digest, _ := img.Digest()
	if _, err := Pull(context.Background(), s, ref, r.pullOpts(t)); err == nil {
		t.Fatal("a tampered layer was taken")
	} else if msg := err.Error(); !strings.Contains(msg, ref) || !strings.Contains(msg, "image "+digest.String()) ||
		!strings.Contains(msg, "layer "+cf.RootFS.DiffIDs[0].String()) {
		t.Errorf("the error names not the image (%s, %s) and the layer (%s): %v", ref, digest, cf.RootFS.DiffIDs[0], err)
	}
	assertRefused(t, s, cf.RootFS.DiffIDs[0].String())
}

// dockerConfig writes a Docker configuration file ($HOME/.docker/config.json
// of the HOME pullOpts made) with the credentials user:pass for host.
func dockerConfig(t *testing.T, host, user, pass string) {
	t.Helper()
	dir := filepath.Join(os.Getenv("HOME"), ".docker")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, host, base64.StdEncoding.EncodeToString([]byte(user+":"+pass)))
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestPullDockerConfig: without --registry-auth, the credentials come
// from the caller's ~/.docker/config.json (HOME's).
func TestPullDockerConfig(t *testing.T) {
	r := newRegistry(t, true, "agent", "s3cret")
	ref := r.push(t, "team/box:1", testImage(t))
	s := newStore(t)
	o := r.pullOpts(t)
	dockerConfig(t, r.host, "agent", "wrong")
	if _, err := Pull(context.Background(), s, ref, o); err == nil {
		t.Error("wrong credentials in ~/.docker/config.json were taken")
	}
	dockerConfig(t, r.host, "agent", "s3cret")
	if _, err := Pull(context.Background(), s, ref, o); err != nil {
		t.Fatal(err)
	}
	checkImage(t, s, ref)
}

// TestPullBearerToken: a registry that wants a bearer token (its 401
// names the realm that hands them out, as Docker Hub's does) is reached
// with a token fetched there with the caller's credentials; without them
// the token server's refusal is the error.
func TestPullBearerToken(t *testing.T) {
	r := startRegistry(t, true, &testRegistry{user: "agent", pass: "s3cret", token: "t0ken"})
	ref := r.push(t, "team/box:1", testImage(t))
	s := newStore(t)
	o := r.pullOpts(t)
	if _, err := Pull(context.Background(), s, ref, o); err == nil || !strings.Contains(err.Error(), "401") && !strings.Contains(strings.ToLower(err.Error()), "unauthorized") {
		t.Errorf("without credentials: %v", err)
	}
	dockerConfig(t, r.host, "agent", "s3cret")
	if _, err := Pull(context.Background(), s, ref, o); err != nil {
		t.Fatal(err)
	}
	checkImage(t, s, ref)
}

// TestPullConcurrent: two pulls of one image at once, into one store,
// both succeed and fetch each blob (layers and configuration) once: the
// second waits for the first and finds the image in the store.
func TestPullConcurrent(t *testing.T) {
	r := newRegistry(t, true, "", "")
	img := testImage(t)
	ref := r.push(t, "box:1", img)
	r.gets()
	s := newStore(t)
	o := r.pullOpts(t)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = Pull(context.Background(), s, ref, o)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	checkImage(t, s, ref)
	got := r.gets()
	ls, _ := img.Layers()
	cfg, _ := img.ConfigName()
	want := []string{cfg.String()}
	for _, l := range ls {
		d, _ := l.Digest()
		want = append(want, d.String())
	}
	for _, d := range want {
		if got[d] != 1 {
			t.Errorf("blob %s fetched %d times, want once (all: %v)", d, got[d], got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("blobs fetched: %v, want %v once each", got, want)
	}
}

// TestPullReferences: Docker's forms of a reference: REPO@sha256:DIGEST
// and REPO:TAG@sha256:DIGEST (the digest rules) pull the image the digest
// names, recorded under REPO@sha256:DIGEST; a digest the registry lacks is
// its error; an image for another platform is refused, naming both.
func TestPullReferences(t *testing.T) {
	r := newRegistry(t, true, "", "")
	img := testImage(t)
	r.push(t, "team/box:1", img)
	digest, _ := img.Digest()
	for _, ref := range []string{r.host + "/team/box@" + digest.String(), r.host + "/team/box:other@" + digest.String()} {
		s := newStore(t)
		rec, err := Pull(context.Background(), s, ref, r.pullOpts(t))
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		if want := r.host + "/team/box@" + digest.String(); rec.Digest != digest.String() || len(rec.Refs) != 1 || rec.Refs[0] != want {
			t.Errorf("%s: recorded %s as %v, want %s", ref, rec.Digest, rec.Refs, want)
		}
		checkImage(t, s, r.host+"/team/box@"+digest.String())
	}
	missing := r.host + "/team/box@sha256:" + strings.Repeat("0", 64)
	if _, err := Pull(context.Background(), newStore(t), missing, r.pullOpts(t)); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("a digest the registry lacks: %v", err)
	}
	riscv := r.push(t, "team/riscv:1", imagetest.Image(t, "riscv64", nil, layerOf(t, tarOf(t, "x=y"))))
	if _, err := Pull(context.Background(), newStore(t), riscv, r.pullOpts(t)); err == nil || !strings.Contains(err.Error(), "is for linux/riscv64, not linux/"+runtime.GOARCH) {
		t.Errorf("an image for another platform: %v", err)
	}
	for _, bad := range []string{"", "Upper/case:1", r.host + "/box@sha256:12", "a b"} {
		if _, err := Pull(context.Background(), newStore(t), bad, r.pullOpts(t)); !errors.Is(err, image.ErrBadRef) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
