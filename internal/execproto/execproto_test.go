package execproto

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestFrames(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, TypeStdout, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := Write(&buf, TypeStdinEOF, nil); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(&buf, TypeExit, Exit{ExitCode: 3}); err != nil {
		t.Fatal(err)
	}
	if got := buf.Bytes()[:HeaderSize]; !bytes.Equal(got, []byte{3, 0, 0, 0, 5}) {
		t.Errorf("header % x", got)
	}
	for _, want := range []Frame{
		{TypeStdout, []byte("hello")},
		{TypeStdinEOF, []byte{}},
		{TypeExit, []byte(`{"exit_code":3,"signal":0,"timed_out":false}`)},
	} {
		f, err := Read(&buf, MaxPayload)
		if err != nil || f.Type != want.Type || !bytes.Equal(f.Payload, want.Payload) {
			t.Errorf("read %d %q, %v; want %d %q", f.Type, f.Payload, err, want.Type, want.Payload)
		}
	}
	if _, err := Read(&buf, MaxPayload); err != io.EOF {
		t.Errorf("at the end: %v", err)
	}
}

func TestBadFrames(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
		want error
	}{
		{"unknown type", []byte{9, 0, 0, 0, 0}, ErrFrame},
		{"type zero", []byte{0, 0, 0, 0, 0}, ErrFrame},
		{"too long", []byte{1, 0, 0, 0, 11}, ErrFrame},
		{"cut in the header", []byte{1, 0}, io.ErrUnexpectedEOF},
		{"cut in the payload", []byte{1, 0, 0, 0, 4, 'a'}, io.ErrUnexpectedEOF},
	} {
		if _, err := Read(bytes.NewReader(tc.data), 10); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := Write(io.Discard, TypeStdin, make([]byte, MaxPayload+1)); !errors.Is(err, ErrFrame) {
		t.Errorf("writing a payload over the limit: %v", err)
	}
}

func TestControlPayloads(t *testing.T) {
	rows, cols, err := ParseResize(Resize(50, 132))
	if err != nil || rows != 50 || cols != 132 {
		t.Errorf("resize: %d %d %v", rows, cols, err)
	}
	if _, _, err := ParseResize([]byte{1}); !errors.Is(err, ErrFrame) {
		t.Errorf("short resize: %v", err)
	}
	if n, err := ParseSignal(Signal(15)); err != nil || n != 15 {
		t.Errorf("signal: %d %v", n, err)
	}
	for _, p := range [][]byte{Signal(0), Signal(65), {1, 2}} {
		if _, err := ParseSignal(p); !errors.Is(err, ErrFrame) {
			t.Errorf("signal % x: %v", p, err)
		}
	}
}
