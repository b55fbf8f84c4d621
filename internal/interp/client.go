package interp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// MaxEventBytes bounds one line of an execution's answer a Client reads:
// a kernel's message is bounded by kernel.DefaultMaxMessageBytes, and its
// JSON on the wire is larger by its escaping at most.
const MaxEventBytes = 2*32<<20 + 64<<10

// maxReplyBytes bounds a contexts call's answer.
const maxReplyBytes = 1 << 20

// Client speaks to a code interpreter (a Server) over connections that
// Dial makes: hutch's daemon dials the sandbox's port Port inside it.
type Client struct {
	hc *http.Client
}

// NewClient returns a client whose connections dial makes.
func NewClient(dial func(ctx context.Context) (net.Conn, error)) *Client {
	tr := &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &Client{hc: &http.Client{Transport: tr}}
}

// CloseIdle closes the client's idle connections.
func (c *Client) CloseIdle() { c.hc.CloseIdleConnections() }

// StatusError is a refusal of the server: its status and message.
type StatusError struct {
	Status  int
	Message string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("code interpreter: %d %s", e.Status, e.Message)
}

// ErrNoContext is wrapped by the error of a call naming a context the
// interpreter does not have.
var ErrNoContext = errors.New("no such context")

// Is makes a 404 match ErrNoContext.
func (e *StatusError) Is(target error) bool {
	return target == ErrNoContext && e.Status == http.StatusNotFound
}

func (c *Client) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://interpreter"+path, r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("code interpreter: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		msg := strings.TrimSpace(string(b))
		var detail struct {
			Detail string `json:"detail"`
		}
		if json.Unmarshal(b, &detail) == nil && detail.Detail != "" {
			msg = detail.Detail
		}
		return nil, &StatusError{resp.StatusCode, msg}
	}
	return resp, nil
}

func (c *Client) call(ctx context.Context, method, path string, body, out any) error {
	resp, err := c.do(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxReplyBytes+1))
	if err != nil {
		return fmt.Errorf("code interpreter: %w", err)
	}
	if len(b) > maxReplyBytes {
		return fmt.Errorf("code interpreter: an answer over %d bytes", maxReplyBytes)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("code interpreter: %w", err)
	}
	return nil
}

// Execute runs req and calls fn with each event of its answer but the
// keepalives and the end, in order. It returns once the answer ended; an
// error when the server refused (*StatusError) or the answer broke off
// before its end. Ending ctx interrupts the execution.
func (c *Client) Execute(ctx context.Context, req ExecuteRequest, fn func(Event)) error {
	st, err := c.Stream(ctx, req)
	if err != nil {
		return err
	}
	defer st.Close()
	for {
		ev, err := st.Next()
		if err != nil {
			return err
		}
		switch ev.Type {
		case EventEnd:
			return nil
		case EventKeepalive:
		default:
			if fn != nil {
				fn(ev)
			}
		}
	}
}

// Stream is the answer of an execution, read event by event as it comes
// (Next); closing it before its end interrupts the execution.
type Stream struct {
	ctx   context.Context
	body  io.ReadCloser
	r     *bufio.Reader
	ended bool // EventEnd was read
}

// Stream starts req and returns its answer once the server answered (its
// refusal: *StatusError). Ending ctx interrupts the execution.
func (c *Client) Stream(ctx context.Context, req ExecuteRequest) (*Stream, error) {
	resp, err := c.do(ctx, http.MethodPost, "/execute", req)
	if err != nil {
		return nil, err
	}
	return &Stream{ctx: ctx, body: resp.Body, r: bufio.NewReaderSize(resp.Body, 64<<10)}, nil
}

// Next returns the answer's next event, keepalives included; EventEnd is
// the last. An answer that breaks off before its end is an error.
func (s *Stream) Next() (Event, error) {
	for {
		line, _, size, err := readLine(s.r, MaxEventBytes)
		if err == nil && line == nil {
			err = fmt.Errorf("a line of the answer of %d bytes, over %d", size, MaxEventBytes)
		}
		if err != nil {
			if s.ctx.Err() != nil {
				return Event{}, s.ctx.Err()
			}
			if errors.Is(err, io.EOF) {
				return Event{}, errors.New("code interpreter: the answer ended before the execution did (the sandbox stopped?)")
			}
			return Event{}, fmt.Errorf("code interpreter: %w", err)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var ev Event
		if err := json.Unmarshal(line, &ev); err != nil {
			return Event{}, fmt.Errorf("code interpreter: a line of the answer: %w", err)
		}
		s.ended = ev.Type == EventEnd
		return ev, nil
	}
}

// Close ends the answer: the execution is interrupted if it runs. After
// its end, the rest of the answer is read so that the connection serves
// the next call.
func (s *Stream) Close() error {
	if s.ended {
		_, _ = io.Copy(io.Discard, io.LimitReader(s.r, 64<<10))
	}
	return s.body.Close()
}

// Contexts lists the interpreter's contexts, in creation order.
func (c *Client) Contexts(ctx context.Context) ([]Context, error) {
	var out []Context
	return out, c.call(ctx, http.MethodGet, "/contexts", nil, &out)
}

// CreateContext makes a context; it returns once its kernel runs.
func (c *Client) CreateContext(ctx context.Context, req CreateContextRequest) (Context, error) {
	var out Context
	return out, c.call(ctx, http.MethodPost, "/contexts", req, &out)
}

// RemoveContext ends context id.
func (c *Client) RemoveContext(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, "/contexts/"+url.PathEscape(id), nil, nil)
}

// RestartContext starts context id's kernel afresh: its state is lost.
func (c *Client) RestartContext(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodPost, "/contexts/"+url.PathEscape(id)+"/restart", nil, nil)
}

// SetEnv sets variables in every context's environment (Server.SetEnv).
func (c *Client) SetEnv(ctx context.Context, env map[string]string) error {
	return c.call(ctx, http.MethodPost, "/hutch/env", EnvRequest{Env: env}, nil)
}

// Ready returns once every context of the interpreter has started its
// kernel, or failed to.
func (c *Client) Ready(ctx context.Context) error {
	return c.call(ctx, http.MethodGet, "/hutch/ready", nil, nil)
}
