package main

import (
	"bytes"
	"context"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// gatedRegistry is go-containerregistry's registry on loopback whose
// layers wait until the gate is opened, so that a test sees a pull under
// way without timing it.
type gatedRegistry struct {
	srv      *httptest.Server
	host     string
	gate     chan struct{}
	openOnce sync.Once
	mu       sync.Mutex
	layers   map[string]bool // the digests of the layers pushed
	// certFile holds the server's certificate (PEM), for SSL_CERT_FILE,
	// when it speaks TLS.
	certFile string
}

func newGatedRegistry(t *testing.T, tls bool) *gatedRegistry {
	t.Helper()
	g := &gatedRegistry{gate: make(chan struct{}), layers: map[string]bool{}}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, blob, _ := strings.Cut(r.URL.Path, "/blobs/")
		g.mu.Lock()
		layer := g.layers[blob]
		g.mu.Unlock()
		if r.Method == http.MethodGet && layer {
			select {
			case <-g.gate:
			case <-r.Context().Done():
				return
			}
		}
		reg.ServeHTTP(w, r)
	})
	if tls {
		g.srv = httptest.NewTLSServer(h)
		g.certFile = filepath.Join(t.TempDir(), "ca.pem")
		pemCert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: g.srv.Certificate().Raw})
		if err := os.WriteFile(g.certFile, pemCert, 0o644); err != nil {
			t.Fatal(err)
		}
	} else {
		g.srv = httptest.NewServer(h)
	}
	t.Cleanup(func() { g.open(); g.srv.Close() })
	g.host = strings.TrimPrefix(strings.TrimPrefix(g.srv.URL, "https://"), "http://")
	return g
}

func (g *gatedRegistry) open() { g.openOnce.Do(func() { close(g.gate) }) }

// push puts img at repoTag and returns the reference; its layers wait
// for the gate from then on.
func (g *gatedRegistry) push(t *testing.T, repoTag string, img v1.Image) string {
	t.Helper()
	ref, err := name.ParseReference(g.host+"/"+repoTag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithTransport(g.srv.Client().Transport)); err != nil {
		t.Fatal(err)
	}
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, l := range ls {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		g.layers[d.String()] = true
	}
	return g.host + "/" + repoTag
}

// startImageCommand starts hutch with args, its stderr (and stdout, when
// stdout is nil) on term, as a command started from a shell is.
func startImageCommand(t *testing.T, term *terminal, env []string, stdout io.Writer, args ...string) <-chan error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	t.Cleanup(cancel)
	dir := hostDir(t)
	cmd := exec.CommandContext(ctx, testutil.Hutch(t), args...)
	cmd.Dir = dir
	cmd.Env = append(env, "TERM=xterm")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = term.slave, term.slave, term.slave
	if stdout != nil {
		cmd.Stdout = stdout
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	term.slave.Close()
	go term.read()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	return waited
}

// TestImagePullTerminal: on a terminal, hutch image pull shows its
// progress in place (the layers done of the image's), then a line with the
// layers and the digest; stdout, not a terminal, gets the digest alone.
// Pulled again, both on the terminal, it says the layers were in the store.
func TestImagePullTerminal(t *testing.T) {
	g := newGatedRegistry(t, false)
	img := imagetest.Image(t, "amd64", nil,
		imagetest.Layer(t, imagetest.Tar(t, imagetest.File("one", strings.Repeat("1", 100<<10), 0o644))),
		imagetest.Layer(t, imagetest.Tar(t, imagetest.File("two", strings.Repeat("2", 100<<10), 0o644))))
	ref := g.push(t, "term/box:1", img)
	digest, _ := img.Digest()
	state := hostDir(t)
	env := []string{"PATH=" + stdPath, "HOME=" + hostDir(t), "LANG=C.UTF-8"}
	args := []string{"image", "pull", ref, "--insecure-registry", g.host, "--state-dir", state}

	term := newTerminal(t, 24, 120)
	var stdout bytes.Buffer
	waited := startImageCommand(t, term, env, &stdout, args...)
	// The blobs wait: the line shows the image under way.
	term.waitFor(t, "pulling "+ref+": 0/2 layers")
	g.open()
	if code := exitCode(t, waited); code != 0 {
		t.Fatalf("exit %d; the terminal showed:\n%s", code, term.shown())
	}
	<-term.done
	shown := term.shown()
	if want := "pulled " + ref + ": 2 layers"; !strings.Contains(shown, want) || !strings.Contains(shown, digest.String()) {
		t.Errorf("the terminal lacks %q and the digest %s:\n%q", want, digest, shown)
	}
	if stdout.String() != digest.String()+"\n" {
		t.Errorf("stdout: %q, want the digest alone", stdout.String())
	}

	term = newTerminal(t, 24, 120)
	waited = startImageCommand(t, term, env, nil, args...)
	if code := exitCode(t, waited); code != 0 {
		t.Fatalf("exit %d; the terminal showed:\n%s", code, term.shown())
	}
	<-term.done
	shown = term.shown()
	if !strings.Contains(shown, "2 layers (2 in the store)") || !strings.Contains(shown, digest.String()+"\n") {
		t.Errorf("a pull of an image in the store showed:\n%q", shown)
	}
}

// TestRunImageStateDir: hutch run --state-dir D --image REF pulls REF into
// D's store (over HUTCH_STATE_DIR), with the pull's progress on the
// terminal hutch run has, and runs from it; the sandbox can neither read
// nor write D, from an image or from the host's root.
func TestRunImageStateDir(t *testing.T) {
	testutil.RequireRoot(t)
	g := newGatedRegistry(t, true)
	g.open()
	ref := g.push(t, "team/bb:1", imagetest.Busybox(t, func(ok bool, reason string) { testutil.Need(t, ok, reason) }))
	ws := hostDir(t)
	state := filepath.Join(ws, "state")
	other := hostDir(t)
	env := []string{"PATH=" + stdPath, "HOME=" + hostDir(t), "LANG=C.UTF-8", "SSL_CERT_FILE=" + g.certFile, "HUTCH_STATE_DIR=" + other}

	term := newTerminal(t, 24, 120)
	waited := startImageCommand(t, term, env, nil, "run", "--state-dir", state, "--workspace", ws, "--image", ref, "--", "cat", "/etc/motd")
	if code := exitCode(t, waited); code != 0 {
		t.Fatalf("exit %d; the terminal showed:\n%s", code, term.shown())
	}
	<-term.done
	shown := term.shown()
	for _, want := range []string{"pulling it", "pulled " + ref + ": 2 layers", ": sha256:", "from the image"} {
		if !strings.Contains(shown, want) {
			t.Errorf("the terminal lacks %q:\n%s", want, shown)
		}
	}
	if b, err := os.ReadFile(filepath.Join(state, "images", "refs.json")); err != nil || !strings.Contains(string(b), ref) {
		t.Errorf("the image is not in --state-dir's store: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(other, "images")); err == nil {
		t.Errorf("HUTCH_STATE_DIR's store was used over --state-dir's")
	}

	// The state directory lies in the workspace, the sandbox's writable
	// place: it still reads none of it and writes nothing there.
	script := `cat state/images/refs.json && echo READ; echo x > state/images/refs.json && echo WROTE; ls state/images/layers && echo LISTED; true`
	for _, args := range [][]string{
		{"run", "--state-dir", state, "--image", ref, "--", "sh", "-c", script},
		{"run", "--state-dir", state, "--", "sh", "-c", script},
		{"run", "--state-dir", state, "--allow-read", state, "--", "sh", "-c", `echo x > state/images/refs.json && echo WROTE; true`},
	} {
		r := hutch(t, invocation{dir: ws, env: env, args: args})
		wantOK(t, r)
		for _, bad := range []string{"READ", "WROTE", "LISTED", "sha256:"} {
			if strings.Contains(r.stdout, bad) {
				t.Errorf("%v: the sandbox reached the store (%s):\n%s", args, bad, r)
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(state, "images", "refs.json")); err != nil || !strings.Contains(string(b), ref) {
		t.Errorf("the store's names changed: %q, %v", b, err)
	}
}
