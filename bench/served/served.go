// Package served holds what hutch's benchmark programs ask a running
// `hutch serve` beyond its SDK: how full its warm pools are, from GET
// /metrics on its unix socket.
package served

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// UnixClient is an HTTP client of the daemon at the unix socket sock (any
// host name reaches it).
func UnixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

// WarmSandboxes returns hutch_warm_sandboxes of the daemon hc reaches: the
// ready sandboxes of each warm pool, by template ("" is the default
// policy's pool).
func WarmSandboxes(ctx context.Context, hc *http.Client) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://hutch/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for l := range strings.SplitSeq(string(b), "\n") {
		rest, ok := strings.CutPrefix(l, `hutch_warm_sandboxes{template="`)
		if !ok {
			continue
		}
		name, v, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			out[name] = f
		}
	}
	return out, nil
}

// WaitWarm waits until the pool of each of templates ("" for the default
// policy's) holds at least n ready sandboxes, polling every poll; an error
// if that takes longer than within.
func WaitWarm(ctx context.Context, hc *http.Client, n int, within, poll time.Duration, templates ...string) error {
	var last map[string]float64
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(poll) {
		var err error
		if last, err = WarmSandboxes(ctx, hc); err != nil {
			return err
		}
		full := 0
		for _, t := range templates {
			if last[t] >= float64(n) {
				full++
			}
		}
		if full == len(templates) {
			return nil
		}
	}
	return fmt.Errorf("the warm pools %q did not fill to %d in %v (hutch_warm_sandboxes %v)", templates, n, within, last)
}
