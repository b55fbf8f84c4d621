// Package execproto is the framing of the exec stream of hutch's HTTP API:
// what flows over the connection of `POST /v1/sandboxes/{id}/exec` once it
// has been upgraded to the protocol "hutch-exec/1". Package api speaks the
// daemon's end, package client the caller's.
//
// # Frames
//
// Both directions carry frames: a 1-byte type, a 4-byte big-endian payload
// length, then the payload. No payload is longer than MaxPayload; senders
// cut data into pieces of at most Chunk bytes.
//
//	type  name       direction         payload
//	1     stdin      client → daemon   bytes for the command's stdin
//	2     stdin-eof  client → daemon   empty: close the command's stdin
//	3     stdout     daemon → client   bytes the command wrote to stdout (with a terminal: everything it shows)
//	4     stderr     daemon → client   bytes the command wrote to stderr
//	5     resize     client → daemon   4 bytes: rows, then columns, each a big-endian uint16
//	6     signal     client → daemon   4 bytes: the signal number, big-endian uint32
//	7     exit       daemon → client   JSON {"exit_code":N,"signal":N,"timed_out":B}; the last frame
//	8     error      daemon → client   JSON {"code":"...","message":"..."}; the last frame
//
// The daemon sends exit once the command ended and its output was sent (or
// stopped arriving: see package api), error when the stream cannot go on
// (the sandbox ended); it closes the connection after either. A client that
// closes the connection before then gets its command killed. Unknown frame
// types are an error for both ends.
package execproto

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Protocol is the value of the Upgrade header that asks for the stream.
const Protocol = "hutch-exec/1"

// PIDHeader is the header of the 101 response that carries the command's
// pid in the sandbox.
const PIDHeader = "Hutch-Pid"

// Frame types.
const (
	TypeStdin    byte = 1
	TypeStdinEOF byte = 2
	TypeStdout   byte = 3
	TypeStderr   byte = 4
	TypeResize   byte = 5
	TypeSignal   byte = 6
	TypeExit     byte = 7
	TypeError    byte = 8
)

const (
	// HeaderSize is the size of a frame's header: type and length.
	HeaderSize = 5
	// MaxPayload bounds every frame's payload.
	MaxPayload = 1 << 20
	// Chunk is the largest data payload a sender makes.
	Chunk = 32 << 10
)

// ErrFrame is wrapped by every error about a malformed frame.
var ErrFrame = errors.New("malformed exec stream frame")

// Frame is one frame.
type Frame struct {
	// Type is one of the Type constants.
	Type byte
	// Payload is the frame's payload.
	Payload []byte
}

// Exit is the payload of an exit frame.
type Exit struct {
	// ExitCode is the command's exit code, 128+Signal when a signal
	// killed it.
	ExitCode int `json:"exit_code"`
	// Signal is the signal that killed it, or 0.
	Signal int `json:"signal"`
	// TimedOut reports that the exec's timeout killed it.
	TimedOut bool `json:"timed_out"`
}

// Error is the payload of an error frame.
type Error struct {
	// Code is one of the API's error codes.
	Code string `json:"code"`
	// Message says what failed.
	Message string `json:"message"`
}

// Write writes a frame in one Write call.
func Write(w io.Writer, typ byte, p []byte) error {
	if len(p) > MaxPayload {
		return fmt.Errorf("%w: payload of %d bytes exceeds %d", ErrFrame, len(p), MaxPayload)
	}
	b := make([]byte, HeaderSize+len(p))
	b[0] = typ
	binary.BigEndian.PutUint32(b[1:HeaderSize], uint32(len(p)))
	copy(b[HeaderSize:], p)
	_, err := w.Write(b)
	return err
}

// WriteJSON writes a frame whose payload is v as JSON.
func WriteJSON(w io.Writer, typ byte, v any) error {
	p, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return Write(w, typ, p)
}

// Read reads one frame whose payload is at most limit bytes. It returns
// io.EOF when r ends before a frame starts, io.ErrUnexpectedEOF inside one.
func Read(r io.Reader, limit int) (Frame, error) {
	var h [HeaderSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Frame{}, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if h[0] < TypeStdin || h[0] > TypeError {
		return Frame{}, fmt.Errorf("%w: unknown type %d", ErrFrame, h[0])
	}
	if int64(n) > int64(limit) {
		return Frame{}, fmt.Errorf("%w: payload of %d bytes exceeds %d", ErrFrame, n, limit)
	}
	f := Frame{Type: h[0], Payload: make([]byte, n)}
	if _, err := io.ReadFull(r, f.Payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	return f, nil
}

// Resize is the payload of a resize frame.
func Resize(rows, cols uint16) []byte {
	var p [4]byte
	binary.BigEndian.PutUint16(p[:2], rows)
	binary.BigEndian.PutUint16(p[2:], cols)
	return p[:]
}

// ParseResize reads the payload of a resize frame.
func ParseResize(p []byte) (rows, cols uint16, err error) {
	if len(p) != 4 {
		return 0, 0, fmt.Errorf("%w: resize payload of %d bytes, want 4", ErrFrame, len(p))
	}
	return binary.BigEndian.Uint16(p[:2]), binary.BigEndian.Uint16(p[2:]), nil
}

// Signal is the payload of a signal frame.
func Signal(n int) []byte {
	var p [4]byte
	binary.BigEndian.PutUint32(p[:], uint32(n))
	return p[:]
}

// ParseSignal reads the payload of a signal frame.
func ParseSignal(p []byte) (int, error) {
	if len(p) != 4 {
		return 0, fmt.Errorf("%w: signal payload of %d bytes, want 4", ErrFrame, len(p))
	}
	n := binary.BigEndian.Uint32(p)
	if n < 1 || n > 64 {
		return 0, fmt.Errorf("%w: signal %d out of range 1-64", ErrFrame, n)
	}
	return int(n), nil
}
