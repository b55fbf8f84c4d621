// Package export writes an image made of layer directories — an image's
// from hutch's store (package image) and a snapshot's over it — as an OCI
// image: an OCI image layout in a tar (what `hutch image import`,
// skopeo, crane and containerd take), or a `docker save` tarball (what
// `docker load` takes).
//
// Layers are kept unpacked, in overlayfs's form, and are written back as
// OCI layers, uncompressed:
//
//   - a whiteout (a 0/0 character device NAME) is an empty file .wh.NAME;
//   - an opaque directory (trusted.overlay.opaque or user.overlay.opaque
//     "y") is followed by an empty file DIR/.wh..wh..opq;
//   - the other overlayfs attributes are left out, every other extended
//     attribute is a PAX record SCHILY.xattr.NAME;
//   - a file with several links is whole at its first name (in the order
//     below) and a tar hard link at the others;
//   - device nodes and sockets are left out; modes (set-id bits too),
//     owners (numeric, no names) and modification times (to the second)
//     are the tree's;
//   - a name that starts with .wh. cannot be carried (it means a deletion
//     in a layer): such a tree is refused (ErrWhiteoutName).
//
// Entries go in byte order of their names, depth first, so that the same
// tree is always the same bytes: the same layers and configuration make
// the same image digest. Since a layer's digest and size must stand in the
// manifest, and in the tar header of its blob, before its bytes, Plan
// writes each layer once to hash it and WriteTo writes it again, checking
// that it is the same (ErrChanged otherwise); nothing is held in memory or
// on disk but a buffer.
package export

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/image"
)

// Errors of an export.
var (
	// ErrWhiteoutName: the tree holds a name an OCI layer reads as a
	// deletion.
	ErrWhiteoutName = errors.New("a name starting with " + whiteoutPrefix + " means a deletion in an OCI layer and cannot be exported")
	// ErrChanged: a layer changed between Plan and WriteTo.
	ErrChanged = errors.New("the layer changed while it was exported")
)

const (
	whiteoutPrefix = ".wh."
	opaqueName     = ".wh..wh..opq"
)

// Media types of what is written.
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"
)

// Format is the form of the tar WriteTo writes.
type Format int

const (
	// OCI is an OCI image layout: oci-layout, index.json and
	// blobs/sha256/.
	OCI Format = iota
	// Docker is a `docker save` tarball: manifest.json and the same
	// blobs.
	Docker
)

// ParseFormat parses "oci" (or "") and "docker".
func ParseFormat(s string) (Format, error) {
	switch s {
	case "", "oci":
		return OCI, nil
	case "docker":
		return Docker, nil
	}
	return 0, fmt.Errorf("format %q: want oci or docker", s)
}

// Source is what an image is made of.
type Source struct {
	// Base is the base image's record: its platform and, when
	// BaseConfig is nil, its configuration.
	Base *image.Image
	// BaseConfig is the base image's configuration as it came
	// (image.Store.ConfigFile), nil when the store does not keep it.
	BaseConfig []byte
	// BaseLayers are the base image's layer directories, bottom first.
	BaseLayers []string
	// Layers are the layer directories stacked over it, bottom first.
	Layers []string
	// Created is when the image was made (the configuration's created
	// and the new layers' history).
	Created time.Time
	// CreatedBy names what made the new layers, for their history
	// ("hutch snapshot snap-…").
	CreatedBy string
	// Name, if set, is the reference the image is written under
	// (index.json's org.opencontainers.image.ref.name, manifest.json's
	// RepoTags); it changes neither the manifest nor its digest.
	Name string
}

// Image is a planned export: its layers hashed, its configuration and
// manifest made.
type Image struct {
	name     string
	layers   []layerBlob // bottom first, as the manifest lists them
	config   []byte
	manifest []byte
	created  time.Time
}

// layerBlob is one layer: its directory, digest and size.
type layerBlob struct {
	dir    string
	digest string
	size   int64
}

// Plan hashes src's layers (writing each once, to nowhere) and makes the
// image's configuration and manifest.
func Plan(src Source) (*Image, error) {
	if src.Base == nil {
		return nil, errors.New("export: no base image")
	}
	im := &Image{name: src.Name, created: src.Created.UTC().Truncate(time.Second)}
	seen := map[string]layerBlob{}
	for _, dir := range append(append([]string(nil), src.BaseLayers...), src.Layers...) {
		b, ok := seen[dir]
		if !ok {
			h := &hashCounter{h: sha256.New()}
			if err := WriteLayer(h, dir); err != nil {
				return nil, fmt.Errorf("export: %w", err)
			}
			b = layerBlob{dir: dir, digest: h.digest(), size: h.n}
			seen[dir] = b
		}
		im.layers = append(im.layers, b)
	}
	var err error
	if im.config, err = im.makeConfig(src); err != nil {
		return nil, err
	}
	type descriptor struct {
		MediaType string `json:"mediaType"`
		Digest    string `json:"digest"`
		Size      int64  `json:"size"`
	}
	man := struct {
		SchemaVersion int          `json:"schemaVersion"`
		MediaType     string       `json:"mediaType"`
		Config        descriptor   `json:"config"`
		Layers        []descriptor `json:"layers"`
	}{SchemaVersion: 2, MediaType: MediaTypeManifest,
		Config: descriptor{MediaTypeConfig, digestOf(im.config), int64(len(im.config))}, Layers: []descriptor{}}
	for _, l := range im.layers {
		man.Layers = append(man.Layers, descriptor{MediaTypeLayer, l.digest, l.size})
	}
	if im.manifest, err = json.Marshal(man); err != nil {
		return nil, err
	}
	return im, nil
}

// Digest is the manifest's digest: the image's identity in a registry.
func (im *Image) Digest() string { return digestOf(im.manifest) }

// ConfigDigest is the configuration's digest (Docker's image ID).
func (im *Image) ConfigDigest() string { return digestOf(im.config) }

// makeConfig is the base's configuration with the layers' diff IDs, the
// new layers' history and the creation time.
func (im *Image) makeConfig(src Source) ([]byte, error) {
	cfg := map[string]json.RawMessage{}
	if src.BaseConfig != nil {
		if err := json.Unmarshal(src.BaseConfig, &cfg); err != nil {
			return nil, fmt.Errorf("export: the base image's configuration: %w", err)
		}
	} else {
		// An image brought in before the store kept configurations:
		// what its record says.
		goos, arch, _ := strings.Cut(src.Base.Platform, "/")
		arch, variant, _ := strings.Cut(arch, "/")
		c := src.Base.Config
		set(cfg, "os", goos)
		set(cfg, "architecture", arch)
		if variant != "" {
			set(cfg, "variant", variant)
		}
		set(cfg, "config", struct {
			User       string   `json:"User,omitempty"`
			Env        []string `json:"Env,omitempty"`
			Entrypoint []string `json:"Entrypoint,omitempty"`
			Cmd        []string `json:"Cmd,omitempty"`
			WorkingDir string   `json:"WorkingDir,omitempty"`
		}{c.User, c.Env, c.Entrypoint, c.Cmd, c.WorkingDir})
	}
	diffIDs := make([]string, 0, len(im.layers))
	for _, l := range im.layers {
		diffIDs = append(diffIDs, l.digest)
	}
	set(cfg, "rootfs", map[string]any{"type": "layers", "diff_ids": diffIDs})
	set(cfg, "created", im.created.Format(time.RFC3339))

	// The base's history stays when it matches its layers (one entry
	// without empty_layer per layer); else each base layer gets one.
	var history []map[string]json.RawMessage
	if raw, ok := cfg["history"]; ok && json.Unmarshal(raw, &history) != nil {
		history = nil
	}
	nonEmpty := 0
	for _, h := range history {
		var empty bool
		if raw, ok := h["empty_layer"]; ok && json.Unmarshal(raw, &empty) == nil && empty {
			continue
		}
		nonEmpty++
	}
	entry := func(createdBy, comment string) map[string]json.RawMessage {
		e := map[string]json.RawMessage{}
		set(e, "created", im.created.Format(time.RFC3339))
		set(e, "created_by", createdBy)
		set(e, "comment", comment)
		return e
	}
	if nonEmpty != len(src.BaseLayers) {
		history = nil
		for i := range src.BaseLayers {
			history = append(history, entry("base image "+src.Base.Digest, fmt.Sprintf("layer %d of %d", i+1, len(src.BaseLayers))))
		}
	}
	for i := range src.Layers {
		history = append(history, entry(src.CreatedBy, fmt.Sprintf("layer %d of %d", i+1, len(src.Layers))))
	}
	set(cfg, "history", history)
	return json.Marshal(cfg)
}

// set sets m[key] to v's JSON.
func set[M ~map[string]json.RawMessage](m M, key string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only values that marshal are set
	}
	m[key] = b
}

// digestOf is b's sha256 digest.
func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// blobName is the name of the blob digest in the tar.
func blobName(digest string) string {
	return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:")
}

// member is one entry of the tar WriteTo writes: a directory (dir), a
// small file (body) or a layer.
type member struct {
	name  string
	dir   bool
	body  []byte
	layer *layerBlob
}

func (m member) size() int64 {
	if m.layer != nil {
		return m.layer.size
	}
	return int64(len(m.body))
}

// members lists the tar's entries in format f: the small files first, so
// that a reader of the stream has the manifest before the layers.
func (im *Image) members(f Format) ([]member, error) {
	var out []member
	switch f {
	case OCI:
		index := map[string]any{"schemaVersion": 2, "mediaType": MediaTypeIndex}
		desc := map[string]any{"mediaType": MediaTypeManifest, "digest": im.Digest(), "size": len(im.manifest)}
		if im.name != "" {
			desc["annotations"] = map[string]string{"org.opencontainers.image.ref.name": im.name}
		}
		index["manifests"] = []any{desc}
		ib, err := json.Marshal(index)
		if err != nil {
			return nil, err
		}
		out = append(out, member{name: "oci-layout", body: []byte(`{"imageLayoutVersion":"1.0.0"}`)}, member{name: "index.json", body: ib})
	case Docker:
		entry := map[string]any{"Config": blobName(im.ConfigDigest()), "RepoTags": nil}
		if im.name != "" {
			entry["RepoTags"] = []string{im.name}
		}
		var layers []string
		for _, l := range im.layers {
			layers = append(layers, blobName(l.digest))
		}
		entry["Layers"] = layers
		mb, err := json.Marshal([]any{entry})
		if err != nil {
			return nil, err
		}
		out = append(out, member{name: "manifest.json", body: mb})
	default:
		return nil, fmt.Errorf("export: format %d", f)
	}
	out = append(out, member{name: "blobs/", dir: true}, member{name: "blobs/sha256/", dir: true},
		member{name: blobName(im.ConfigDigest()), body: im.config})
	if f == OCI {
		out = append(out, member{name: blobName(im.Digest()), body: im.manifest})
	}
	written := map[string]bool{}
	for i := range im.layers {
		l := &im.layers[i]
		if !written[l.digest] {
			written[l.digest] = true
			out = append(out, member{name: blobName(l.digest), layer: l})
		}
	}
	return out, nil
}

// Size is the size of the tar WriteTo writes in format f.
func (im *Image) Size(f Format) (int64, error) {
	ms, err := im.members(f)
	if err != nil {
		return 0, err
	}
	n := int64(2 * blockSize) // the end of the archive
	for _, m := range ms {
		n += blockSize + (m.size()+blockSize-1)/blockSize*blockSize
	}
	return n, nil
}

// blockSize is a tar block's; every name written fits a ustar header,
// and every header is one block.
const blockSize = 512

// maxUstarSize is the size a ustar header cannot hold (8 GiB).
const maxUstarSize = 1 << 33

// WriteTo writes the image to w as a tar in format f, each layer written
// again from its directory and checked against its digest (ErrChanged).
func (im *Image) WriteTo(w io.Writer, f Format) (int64, error) {
	ms, err := im.members(f)
	if err != nil {
		return 0, err
	}
	cw := &hashCounter{w: w}
	tw := tar.NewWriter(cw)
	for _, m := range ms {
		hdr := &tar.Header{Name: m.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: m.size(), ModTime: im.created, Format: tar.FormatUSTAR}
		if hdr.Size >= maxUstarSize {
			// GNU's header holds a larger size in the same block.
			hdr.Format = tar.FormatGNU
		}
		if m.dir {
			hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return cw.n, fmt.Errorf("export: %s: %w", m.name, err)
		}
		switch {
		case m.layer != nil:
			h := &hashCounter{h: sha256.New(), w: tw}
			if err := WriteLayer(h, m.layer.dir); err != nil {
				return cw.n, fmt.Errorf("export: %w", err)
			}
			if h.n != m.layer.size || h.digest() != m.layer.digest {
				return cw.n, fmt.Errorf("export: layer %s: %w", m.layer.dir, ErrChanged)
			}
		case !m.dir:
			if _, err := tw.Write(m.body); err != nil {
				return cw.n, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return cw.n, err
	}
	return cw.n, nil
}

// hashCounter counts (and, with h, hashes) what is written, and passes it
// on to w, if set.
type hashCounter struct {
	h hash.Hash
	w io.Writer
	n int64
}

func (c *hashCounter) Write(b []byte) (int, error) {
	if c.w != nil {
		n, err := c.w.Write(b)
		c.n += int64(n)
		if c.h != nil {
			c.h.Write(b[:n])
		}
		return n, err
	}
	c.n += int64(len(b))
	c.h.Write(b)
	return len(b), nil
}

func (c *hashCounter) digest() string { return "sha256:" + hex.EncodeToString(c.h.Sum(nil)) }
