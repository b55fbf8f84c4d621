package fetch

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/docker/cli/cli/config/configfile"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/hutch-sandbox/hutch/internal/image"
)

// PullOptions say where and how an image is pulled.
type PullOptions struct {
	Options
	// Insecure lists the registries (HOST:PORT) that may be reached over
	// plain HTTP. Every other registry is reached over HTTPS only, also on
	// loopback and private addresses.
	Insecure []string
	// AuthFile is a Docker configuration file ({"auths": …}) to take
	// credentials from instead of ~/.docker/config.json (and
	// $DOCKER_CONFIG, and Podman's auth.json), which are read otherwise.
	AuthFile string
	// Platform is the platform to take from a multi-platform index
	// ("linux/amd64", "linux/arm64/v8"); this machine's when empty.
	Platform string
	// Transport carries the requests (http.DefaultTransport when nil);
	// hutch's plain-HTTP rule is applied on top of it.
	Transport http.RoundTripper
}

// Pull brings the image ref names in from its registry: a multi-platform
// index resolved to the platform, each layer verified while it is
// unpacked (and not fetched at all when the store holds it), the image
// recorded under ref's name.
func Pull(ctx context.Context, s *image.Store, ref string, opt PullOptions) (*image.Image, error) {
	if _, err := image.Normalize(ref); err != nil {
		return nil, err
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", image.ErrBadRef, ref, err)
	}
	host := r.Context().RegistryStr()
	insecure := slices.Contains(opt.Insecure, host)
	if insecure {
		if r, err = name.ParseReference(ref, name.Insecure); err != nil {
			return nil, fmt.Errorf("%w: %q: %v", image.ErrBadRef, ref, err)
		}
	}
	plat, err := platformOf(opt.Platform)
	if err != nil {
		return nil, err
	}
	kc, err := keychain(opt.AuthFile)
	if err != nil {
		return nil, err
	}
	tr := opt.Transport
	if tr == nil {
		tr = http.DefaultTransport
	}
	desc, err := remote.Get(r,
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(kc),
		remote.WithPlatform(plat),
		remote.WithTransport(httpsOnly{next: tr, insecure: opt.Insecure}),
		remote.WithUserAgent("hutch"))
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	img, err := desc.Image()
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	opt.compressed = true
	opt.platform = &plat
	rec, err := Add(s, img, []string{ref}, opt.Options)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	return rec, nil
}

// platformOf parses "os/arch[/variant]"; "" is this machine's.
func platformOf(p string) (v1.Platform, error) {
	if p == "" {
		plat := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
		if runtime.GOARCH == "arm64" {
			plat.Variant = "v8"
		}
		return plat, nil
	}
	parts := strings.Split(p, "/")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return v1.Platform{}, fmt.Errorf("--platform %q: want OS/ARCH or OS/ARCH/VARIANT", p)
	}
	plat := v1.Platform{OS: parts[0], Architecture: parts[1]}
	if len(parts) == 3 {
		plat.Variant = parts[2]
	}
	return plat, nil
}

// platformMatches reports whether an image of platform p ("os/arch",
// perhaps "/variant"; "/" when the image does not say) runs on want.
func platformMatches(p string, want v1.Platform) bool {
	if p == "/" {
		return true // an image that does not say
	}
	goos, arch, _ := strings.Cut(p, "/")
	arch, _, _ = strings.Cut(arch, "/")
	return goos == want.OS && arch == want.Architecture
}

// httpsOnly refuses plain-HTTP requests to registries not named as
// insecure: go-containerregistry would try HTTP by itself for loopback
// and private addresses.
type httpsOnly struct {
	next     http.RoundTripper
	insecure []string
}

func (h httpsOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" && !slices.Contains(h.insecure, req.URL.Host) {
		return nil, fmt.Errorf("plain HTTP to %s refused: name it with --insecure-registry %s to allow it", req.URL.Host, req.URL.Host)
	}
	return h.next.RoundTrip(req)
}

// keychain is where a pull's credentials come from: the Docker
// configuration file authFile (--registry-auth), else the caller's own,
// $DOCKER_CONFIG/config.json or ~/.docker/config.json (read at every pull,
// as HOME is then: Docker's own loader keeps the first directory it found
// for the life of the process), else Podman's auth.json where
// go-containerregistry looks for it.
func keychain(authFile string) (authn.Keychain, error) {
	if authFile != "" {
		return fileKeychain(authFile, "--registry-auth ")
	}
	dir := os.Getenv("DOCKER_CONFIG")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return authn.DefaultKeychain, nil
		}
		dir = filepath.Join(home, ".docker")
	}
	if p := filepath.Join(dir, "config.json"); fileExists(p) {
		return fileKeychain(p, "")
	}
	return authn.DefaultKeychain, nil
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// fileKeychain takes credentials from the Docker configuration file path
// (with the credential helpers it names); errors name it after what.
func fileKeychain(path, what string) (authn.Keychain, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s%w", what, err)
	}
	defer f.Close()
	cf := configfile.New(path)
	if err := cf.LoadFromReader(f); err != nil {
		return nil, fmt.Errorf("%s%s: %w", what, path, err)
	}
	return configKeychain{cf}, nil
}

type configKeychain struct{ cf *configfile.ConfigFile }

func (k configKeychain) Resolve(target authn.Resource) (authn.Authenticator, error) {
	key := target.RegistryStr()
	if key == name.DefaultRegistry {
		key = authn.DefaultAuthKey
	}
	ac, err := k.cf.GetAuthConfig(key)
	if err != nil {
		return nil, err
	}
	cfg := authn.AuthConfig{Username: ac.Username, Password: ac.Password, Auth: ac.Auth,
		IdentityToken: ac.IdentityToken, RegistryToken: ac.RegistryToken}
	if cfg == (authn.AuthConfig{}) {
		return authn.Anonymous, nil
	}
	return authn.FromConfig(cfg), nil
}
