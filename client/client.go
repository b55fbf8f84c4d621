// Package client is the Go SDK of hutch's daemon (`hutch serve`): it
// creates, lists, extends and destroys sandboxes, runs commands in them
// (to completion, or streaming with stdin, a terminal and signals),
// runs code in the code interpreter of a sandbox whose image has Jupyter
// kernels (RunCode: stateful contexts, rich results such as plots),
// reads and writes their files and directories, and lists, pulls and
// removes the images of the daemon's store that sandboxes start from.
// Every sandbox runs in an isolation tier (CreateOptions.Tier,
// Sandbox.Tier): the daemon's default unless the create names one.
//
// A Client talks to one daemon, over its unix socket ("unix:///path", the
// default being unix:///run/hutch/hutch.sock) or over HTTP
// ("http://host:port" or "https://host:port"), with a bearer token when
// it has one. Its zero value reads HUTCH_HOST and HUTCH_TOKEN from the
// environment on first use:
//
//	var c client.Client
//	sb, err := c.Create(ctx, client.CreateOptions{Timeout: 10 * time.Minute})
//	res, err := c.Run(ctx, sb.ID, client.Command{Args: []string{"uname", "-a"}})
//
// Every error the daemon reports is an *Error with its HTTP status, code
// and message; errors.Is matches it against ErrNotFound, ErrInvalid and the
// other sentinels by code.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// DefaultHost is the daemon's address when neither the Client nor
// HUTCH_HOST names one.
const DefaultHost = "unix:///run/hutch/hutch.sock"

// maxJSONResponse bounds a JSON answer (a run's output is the largest).
const maxJSONResponse = 256 << 20

// Client is a client of one daemon. Its zero value is ready to use; it is
// safe for concurrent use once in use, and its fields must not change
// then.
type Client struct {
	// Host is the daemon's address: "unix:///path/to/socket",
	// "http://host:port" or "https://host:port". Empty: $HUTCH_HOST, or
	// DefaultHost.
	Host string
	// Token is the bearer token sent with every request. Empty:
	// $HUTCH_TOKEN (none on the unix socket acts as the daemon's admin
	// tenant).
	Token string

	once    sync.Once
	initErr error
	base    string // URL prefix of every request
	token   string
	hc      *http.Client
	dial    func(ctx context.Context) (net.Conn, error) // a connection for an exec stream
	tlsHost string                                      // server name for https streams; "" without TLS
	reqHost string                                      // the Host header
}

// New returns a client of the daemon at host with token; empty values are
// taken from HUTCH_HOST and HUTCH_TOKEN, as for the zero Client. It fails
// if host is not a valid address.
func New(host, token string) (*Client, error) {
	c := &Client{Host: host, Token: token}
	if err := c.init(); err != nil {
		return nil, err
	}
	return c, nil
}

// init resolves the address once.
func (c *Client) init() error {
	c.once.Do(func() { c.initErr = c.setup() })
	return c.initErr
}

func (c *Client) setup() error {
	host := c.Host
	if host == "" {
		host = os.Getenv("HUTCH_HOST")
	}
	if host == "" {
		host = DefaultHost
	}
	c.token = c.Token
	if c.token == "" {
		c.token = os.Getenv("HUTCH_TOKEN")
	}
	u, err := url.Parse(host)
	if err != nil {
		return fmt.Errorf("hutch client: host %q: %w", host, err)
	}
	tr := &http.Transport{
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 0,
		ExpectContinueTimeout: time.Second,
	}
	var d net.Dialer
	switch u.Scheme {
	case "unix":
		if u.Host != "" || u.Path == "" || u.RawQuery != "" {
			return fmt.Errorf("hutch client: host %q: want unix:///absolute/path/to/socket", host)
		}
		path := u.Path
		c.dial = func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", path) }
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) { return c.dial(ctx) }
		c.base, c.reqHost = "http://hutch", "hutch"
	case "http", "https":
		if u.Host == "" || u.RawQuery != "" || u.User != nil {
			return fmt.Errorf("hutch client: host %q: want %s://host:port", host, u.Scheme)
		}
		addr := u.Host
		if u.Port() == "" {
			port := "80"
			if u.Scheme == "https" {
				port = "443"
			}
			addr = net.JoinHostPort(u.Hostname(), port)
		}
		c.base = u.Scheme + "://" + u.Host + strings.TrimSuffix(u.Path, "/")
		c.reqHost = u.Host
		c.dial = func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
		if u.Scheme == "https" {
			c.tlsHost = u.Hostname()
		}
		tr.DialContext = d.DialContext
		tr.ForceAttemptHTTP2 = true
	default:
		return fmt.Errorf("hutch client: host %q: want unix:///path, http://host:port or https://host:port", host)
	}
	c.hc = &http.Client{Transport: tr}
	return nil
}

// dialStream opens a connection for an exec stream: TLS for https, with
// HTTP/1.1 only (an upgrade needs it).
func (c *Client) dialStream(ctx context.Context) (net.Conn, error) {
	conn, err := c.dial(ctx)
	if err != nil || c.tlsHost == "" {
		return conn, err
	}
	tc := tls.Client(conn, &tls.Config{ServerName: c.tlsHost, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return tc, nil
}

// newRequest makes a request of path (already escaped) with query q.
func (c *Client) newRequest(ctx context.Context, method, path string, q url.Values, body io.Reader) (*http.Request, error) {
	if err := c.init(); err != nil {
		return nil, err
	}
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// send sends req and returns the response of a success; any other status
// is returned as an *Error.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("hutch client: %s %s: %w", req.Method, req.URL.Path, err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, readError(resp)
	}
	return resp, nil
}

// call sends a request with in as its JSON body (none if nil) and decodes
// a JSON answer into out (if not nil).
func (c *Client) call(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("hutch client: %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := c.newRequest(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	if err := jsonDecode(io.LimitReader(resp.Body, maxJSONResponse), out); err != nil {
		return fmt.Errorf("hutch client: %s %s: decode the answer: %w", method, path, err)
	}
	return nil
}

// copyTo copies the answer of GET path?q to w; what names the transfer in
// an error (one the daemon broke off, too).
func (c *Client) copyTo(ctx context.Context, path string, q url.Values, w io.Writer, what string) (int64, error) {
	req, err := c.newRequest(ctx, http.MethodGet, path, q, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.send(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("hutch client: %s: %w", what, err)
	}
	return n, nil
}

// sandboxPath is the path of a sandbox's resource.
func sandboxPath(id string, rest ...string) string {
	p := "/v1/sandboxes/" + url.PathEscape(id)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// Health checks that the daemon answers (and accepts the token).
func (c *Client) Health(ctx context.Context) error {
	var out struct {
		OK bool `json:"ok"`
	}
	if err := c.call(ctx, http.MethodGet, "/v1/health", nil, nil, &out); err != nil {
		return err
	}
	if !out.OK {
		return errors.New("hutch client: the daemon is not healthy")
	}
	return nil
}

// jsonDecode decodes one JSON value from r into out.
func jsonDecode(r io.Reader, out any) error { return json.NewDecoder(r).Decode(out) }
