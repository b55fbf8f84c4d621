package fetch

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/hutch-sandbox/hutch/internal/image"
)

// PushOptions say where and how an image is pushed.
type PushOptions struct {
	// Insecure lists the registries (HOST:PORT) that may be reached over
	// plain HTTP; every other one is reached over HTTPS only.
	Insecure []string
	// AuthFile is a Docker configuration file to take credentials from
	// instead of the caller's own (as PullOptions.AuthFile).
	AuthFile string
	// Transport carries the requests (http.DefaultTransport when nil).
	Transport http.RoundTripper
	// Pushed, if set, is told of each blob as it is sent (or found in
	// the registry already).
	Pushed func(digest string, size int64, existed bool)
}

// maxPushJSON bounds the layout's index, manifest and configuration.
const maxPushJSON = 4 << 20

// PushLayout pushes to ref the image of r, an OCI image layout in a tar
// whose index, manifest and configuration come before its layers (as
// package export writes it), reading it once: each layer goes to the
// registry as it is read, so that nothing is held but a buffer. The
// registry checks every blob against its digest. It returns the
// manifest's digest.
func PushLayout(ctx context.Context, r io.Reader, ref string, opt PushOptions) (string, error) {
	if _, err := image.Normalize(ref); err != nil {
		return "", err
	}
	dst, err := name.ParseReference(ref)
	if err == nil && slices.Contains(opt.Insecure, dst.Context().RegistryStr()) {
		dst, err = name.ParseReference(ref, name.Insecure)
	}
	if err != nil {
		return "", fmt.Errorf("%w: %q: %v", image.ErrBadRef, ref, err)
	}
	kc, err := keychain(opt.AuthFile)
	if err != nil {
		return "", err
	}
	tr := opt.Transport
	if tr == nil {
		tr = http.DefaultTransport
	}
	ropts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(kc),
		remote.WithTransport(httpsOnly{next: tr, insecure: opt.Insecure}), remote.WithUserAgent("hutch")}
	p := &layoutPush{repo: dst.Context(), opts: ropts, opt: opt, small: map[string][]byte{}}
	tarR := tar.NewReader(r)
	for {
		hdr, err := tarR.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", fmt.Errorf("push %s: read the image: %w", ref, err)
		}
		if err := p.entry(hdr, tarR); err != nil {
			return "", fmt.Errorf("push %s: %w", ref, err)
		}
	}
	if p.manifest == nil {
		return "", fmt.Errorf("push %s: the image has no manifest (not an OCI image layout?)", ref)
	}
	for _, l := range p.manifest.Layers {
		if !p.sent[l.Digest.String()] {
			return "", fmt.Errorf("push %s: the image lacks its layer %s", ref, l.Digest)
		}
	}
	cfg := p.small[p.manifest.Config.Digest.String()]
	if cfg == nil {
		return "", fmt.Errorf("push %s: the image lacks its configuration %s", ref, p.manifest.Config.Digest)
	}
	if err := p.send(blob{digest: p.manifest.Config.Digest, size: int64(len(cfg)), mediaType: p.manifest.Config.MediaType,
		r: io.NopCloser(bytes.NewReader(cfg))}); err != nil {
		return "", fmt.Errorf("push %s: configuration: %w", ref, err)
	}
	if err := remote.Put(dst, rawManifest{p.rawManifest, p.manifest.MediaType}, ropts...); err != nil {
		return "", fmt.Errorf("push %s: manifest: %w", ref, err)
	}
	return p.manifestDigest.String(), nil
}

// layoutPush is one PushLayout.
type layoutPush struct {
	repo  name.Repository
	opts  []remote.Option
	opt   PushOptions
	index bool
	// small are the JSON blobs read before the manifest named them.
	small          map[string][]byte
	manifestDigest v1.Hash
	manifest       *v1.Manifest
	rawManifest    []byte
	sent           map[string]bool
}

// entry takes one entry of the layout's tar.
func (p *layoutPush) entry(hdr *tar.Header, r io.Reader) error {
	n := path.Clean(strings.TrimPrefix(hdr.Name, "./"))
	switch {
	case hdr.Typeflag == tar.TypeDir || n == "oci-layout":
		return nil
	case hdr.Typeflag != tar.TypeReg:
		return fmt.Errorf("%s: not a file", n)
	case n == "index.json":
		b, err := readSmall(r, hdr.Size, n)
		if err != nil {
			return err
		}
		var idx v1.IndexManifest
		if err := json.Unmarshal(b, &idx); err != nil {
			return fmt.Errorf("index.json: %w", err)
		}
		if len(idx.Manifests) != 1 || !idx.Manifests[0].MediaType.IsImage() {
			return fmt.Errorf("index.json: want one image manifest, found %d entries", len(idx.Manifests))
		}
		p.index, p.manifestDigest = true, idx.Manifests[0].Digest
		return p.takeManifest()
	}
	hex, ok := strings.CutPrefix(n, "blobs/sha256/")
	if !ok || len(hex) != 64 {
		return nil // not part of the image
	}
	digest := v1.Hash{Algorithm: "sha256", Hex: hex}
	if p.manifest != nil {
		for _, l := range p.manifest.Layers {
			if l.Digest == digest {
				if l.Size != hdr.Size {
					return fmt.Errorf("layer %s: %d bytes, the manifest says %d", digest, hdr.Size, l.Size)
				}
				if err := p.send(blob{digest: digest, size: l.Size, mediaType: l.MediaType, r: io.NopCloser(r)}); err != nil {
					return fmt.Errorf("layer %s: %w", digest, err)
				}
				return nil
			}
		}
	}
	// The manifest or configuration (or the manifest is not known yet).
	b, err := readSmall(r, hdr.Size, n)
	if err != nil {
		return err
	}
	if got, _, _ := v1.SHA256(bytes.NewReader(b)); got != digest {
		return fmt.Errorf("%s: its content is %s", n, got)
	}
	p.small[digest.String()] = b
	return p.takeManifest()
}

// takeManifest parses the manifest once index.json named it and it was
// read.
func (p *layoutPush) takeManifest() error {
	if p.manifest != nil || !p.index {
		return nil
	}
	b := p.small[p.manifestDigest.String()]
	if b == nil {
		return nil
	}
	m, err := v1.ParseManifest(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("manifest %s: %w", p.manifestDigest, err)
	}
	if m.MediaType == "" {
		m.MediaType = types.OCIManifestSchema1
	}
	p.manifest, p.rawManifest, p.sent = m, b, map[string]bool{}
	return nil
}

// readSmall reads an entry of the layout that is JSON, bounded.
func readSmall(r io.Reader, size int64, what string) ([]byte, error) {
	if size > maxPushJSON {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d an index, manifest or configuration may have (a layer before the manifest?)", what, size, maxPushJSON)
	}
	return io.ReadAll(io.LimitReader(r, size))
}

// send uploads b, unless it was sent already.
func (p *layoutPush) send(b blob) error {
	if p.sent[b.digest.String()] {
		return nil
	}
	if err := remote.WriteLayer(p.repo, &b, p.opts...); err != nil {
		return err
	}
	if p.sent != nil {
		p.sent[b.digest.String()] = true
	}
	if p.opt.Pushed != nil {
		p.opt.Pushed(b.digest.String(), b.size, b.r != nil)
	}
	return nil
}

// blob is a layer (or configuration) to upload from a stream, which can
// be read once: the registry checks it against its digest.
type blob struct {
	digest    v1.Hash
	size      int64
	mediaType types.MediaType
	r         io.ReadCloser
}

var errReadTwice = errors.New("the layer's stream was read already (the registry asked for it again)")

func (b *blob) Digest() (v1.Hash, error)             { return b.digest, nil }
func (b *blob) DiffID() (v1.Hash, error)             { return b.digest, nil }
func (b *blob) Size() (int64, error)                 { return b.size, nil }
func (b *blob) MediaType() (types.MediaType, error)  { return b.mediaType, nil }
func (b *blob) Uncompressed() (io.ReadCloser, error) { return b.Compressed() }
func (b *blob) Compressed() (rc io.ReadCloser, err error) {
	if b.r == nil {
		return nil, errReadTwice
	}
	rc, b.r = b.r, nil
	return rc, nil
}

// rawManifest is a manifest to put as it is.
type rawManifest struct {
	raw       []byte
	mediaType types.MediaType
}

func (m rawManifest) RawManifest() ([]byte, error)        { return m.raw, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return m.mediaType, nil }
