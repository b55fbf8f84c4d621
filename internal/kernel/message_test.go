package kernel

import (
	"bytes"
	"errors"
	"testing"
)

func TestSignature(t *testing.T) {
	s := &signer{key: []byte("secret"), session: "s"}
	frames, id, err := s.encode("execute_request", map[string]any{"code": "1"})
	if err != nil {
		t.Fatal(err)
	}
	// A kernel's reply has routing identities before the delimiter and the
	// request's header as parent; build one from the request's parts.
	reply := append([][]byte{[]byte("ident")}, frames...)
	reply[4] = frames[2] // parent_header := the request's header
	reply[2] = s.sign(reply[3], reply[4], reply[5], reply[6])
	m, err := s.decode(reply)
	if err != nil {
		t.Fatalf("decode of a well-signed message: %v", err)
	}
	if m.Parent.MsgID != id || m.Header.MsgType != "execute_request" || string(m.Content) != `{"code":"1"}` {
		t.Errorf("decoded %+v", m)
	}

	for i, part := range []string{"header", "parent_header", "metadata", "content"} {
		tampered := clone(reply)
		tampered[3+i] = append(bytes.Clone(tampered[3+i][:len(tampered[3+i])-1]), ' ', '}')
		if _, err := s.decode(tampered); !errors.Is(err, errBadSignature) {
			t.Errorf("tampered %s: want errBadSignature, got %v", part, err)
		}
	}
	forged := clone(reply)
	forged[2] = bytes.Repeat([]byte("0"), 64)
	if _, err := s.decode(forged); !errors.Is(err, errBadSignature) {
		t.Errorf("forged signature: %v", err)
	}
	other := &signer{key: []byte("other"), session: "s"}
	if _, err := other.decode(reply); !errors.Is(err, errBadSignature) {
		t.Errorf("another key: %v", err)
	}
	if _, err := s.decode(reply[:4]); err == nil {
		t.Error("short message accepted")
	}
}

func clone(frames [][]byte) [][]byte {
	c := make([][]byte, len(frames))
	for i, f := range frames {
		c[i] = bytes.Clone(f)
	}
	return c
}
