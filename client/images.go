package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// Image is an image of the daemon's store: what a sandbox may start from
// (CreateOptions.Image).
type Image struct {
	// Digest is its manifest's digest ("sha256:…"), which names it.
	Digest string `json:"digest"`
	// Refs are its names, in their normal form
	// ("docker.io/library/python:3.12").
	Refs []string `json:"refs"`
	// Platform is what it runs on ("linux/amd64").
	Platform string `json:"platform"`
	// Size is the bytes of its layers, unpacked.
	Size int64 `json:"size"`
	// Added is when it came into the store.
	Added time.Time `json:"added"`
}

// PullOptions say how the daemon pulls an image.
type PullOptions struct {
	// Platform is the platform to take from a multi-platform image
	// ("linux/arm64"); the daemon's when empty.
	Platform string
	// InsecureRegistries are the registries (HOST:PORT) the daemon may
	// reach over plain HTTP; every other one over HTTPS only.
	InsecureRegistries []string
	// Progress, if not nil, is called with each step of the pull, as the
	// daemon reports it.
	Progress func(PullEvent)
}

// PullEvent is a step of a pull: a layer started, or done.
type PullEvent struct {
	// Layer is the layer's digest.
	Layer string `json:"layer,omitempty"`
	// Index is the layer's place among the image's Count layers, from 1.
	Index int `json:"index,omitempty"`
	Count int `json:"count,omitempty"`
	// Cached says that the store held the layer already: nothing was
	// fetched.
	Cached bool `json:"cached,omitempty"`
	// Done says that the layer is in the store; Bytes is then its size,
	// unpacked.
	Done  bool  `json:"done,omitempty"`
	Bytes int64 `json:"bytes,omitempty"`
	// Size is what there is to fetch: the layer's compressed size when
	// it starts, and on the image's first event (no Layer, Index 0) the
	// sum of those the store lacks.
	Size int64 `json:"size,omitempty"`
	// Fetched, on events of its own (a few a second at most), counts the
	// bytes fetched so far.
	Fetched int64 `json:"fetched,omitempty"`
}

// maxPullLine bounds one line of a pull's answer.
const maxPullLine = 64 << 10

// Images lists the images of the daemon's store.
func (c *Client) Images(ctx context.Context) ([]Image, error) {
	var out []Image
	if err := c.call(ctx, http.MethodGet, "/v1/images", nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// PullImage has the daemon pull the image ref from its registry into its
// store, and returns the image's digest. Only the daemon's operator may
// (its unix socket, without a token): what the store holds is every
// tenant's to start from. The daemon's failure to pull is an *Error, as
// a refusal is.
func (c *Client) PullImage(ctx context.Context, ref string, o PullOptions) (string, error) {
	in := struct {
		Ref      string   `json:"ref"`
		Platform string   `json:"platform,omitempty"`
		Insecure []string `json:"insecure_registries,omitempty"`
	}{ref, o.Platform, o.InsecureRegistries}
	b, err := json.Marshal(in)
	if err != nil {
		return "", fmt.Errorf("hutch client: pull %s: %w", ref, err)
	}
	req, err := c.newRequest(ctx, http.MethodPost, "/v1/images/pull", nil, bytes.NewReader(b))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.send(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), maxPullLine)
	for sc.Scan() {
		var line struct {
			PullEvent
			Digest string `json:"digest"`
			Error  *struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return "", fmt.Errorf("hutch client: pull %s: decode: %w", ref, err)
		}
		switch {
		case line.Error != nil:
			return "", &Error{Code: line.Error.Code, Message: line.Error.Message}
		case line.Digest != "":
			return line.Digest, nil
		case o.Progress != nil:
			o.Progress(line.PullEvent)
		}
	}
	err = sc.Err()
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return "", fmt.Errorf("hutch client: pull %s: the answer broke off: %w", ref, err)
}

// RemoveImage removes a name of an image from the daemon's store, or the
// image with all its names when ref is its digest; the layers no image
// holds any more, and no sandbox uses, go with it. Only the daemon's
// operator may.
func (c *Client) RemoveImage(ctx context.Context, ref string) error {
	return c.call(ctx, http.MethodDelete, "/v1/images", url.Values{"ref": {ref}}, nil, nil)
}
