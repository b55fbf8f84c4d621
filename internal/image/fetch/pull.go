package fetch

import (
	"context"
	"fmt"
	"net/http"
	"os"
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
	var kc authn.Keychain = authn.DefaultKeychain
	if opt.AuthFile != "" {
		if kc, err = fileKeychain(opt.AuthFile); err != nil {
			return nil, err
		}
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
	if cf, err := img.ConfigFile(); err == nil && !platformMatches(cf, plat) {
		return nil, fmt.Errorf("pull %s: the image is for %s, not %s", ref, platform(cf), plat.String())
	}
	opt.compressed = true
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

func platformMatches(cf *v1.ConfigFile, p v1.Platform) bool {
	if cf.OS == "" && cf.Architecture == "" {
		return true // an image that does not say
	}
	return cf.OS == p.OS && cf.Architecture == p.Architecture
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

// fileKeychain takes credentials from the Docker configuration file path.
func fileKeychain(path string) (authn.Keychain, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--registry-auth: %w", err)
	}
	defer f.Close()
	cf := configfile.New(path)
	if err := cf.LoadFromReader(f); err != nil {
		return nil, fmt.Errorf("--registry-auth %s: %w", path, err)
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
