package mcprelay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// readBufSize is the buffer a lineReader reads its stream through.
const readBufSize = 64 << 10

// lineReader splits a stream into MCP stdio messages: lines ending in
// '\n' (a '\r' before it is dropped too). A line longer than max is not
// kept: its bytes are skipped as they arrive, and what little of it the
// relay needs to answer it (its "id" and "method") is picked out on the
// way, so that no line costs more than max bytes of memory.
type lineReader struct {
	br  *bufio.Reader
	max int
	// buf holds the last line; it is used again for the next, unless it
	// grew beyond keptBuf.
	buf []byte
}

// keptBuf bounds the buffer a lineReader keeps between lines: a session
// that passes a large message now and then does not copy it while it
// grows each time, nor holds the largest one for good.
const keptBuf = 8 << 20

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, readBufSize), max: max}
}

// oversize is a line longer than the limit: its size, and its top-level
// "id" and "method" when the line had them.
type oversize struct {
	size   int64
	id     jsonrpc.ID
	method string
	// request says that the line had a "method" (a request or a
	// notification, not a response).
	request bool
}

// next returns the next line without its end, or the oversize line in
// its place. At the end of the stream it returns io.EOF (after a last
// line without a newline, which it returns first with a nil error). The
// line is valid until the next call.
func (lr *lineReader) next() ([]byte, *oversize, error) {
	if cap(lr.buf) > keptBuf {
		lr.buf = nil
	}
	line := lr.buf[:0]
	defer func() { lr.buf = line }()
	for {
		chunk, err := lr.br.ReadSlice('\n')
		if len(line)+len(chunk) > lr.max+1 || (len(line)+len(chunk) > lr.max && !bytes.HasSuffix(chunk, []byte("\n"))) {
			return nil, lr.skip(line, chunk, err), nil
		}
		line = append(line, chunk...)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF && len(line) > 0:
			return trimEnd(line), nil, nil
		case err != nil:
			return nil, nil, err
		}
		return trimEnd(line), nil, nil
	}
}

// skip reads the rest of an oversize line whose first bytes are head
// and chunk (err being what reading chunk returned), keeping only what
// the top-level scanner picks out.
func (lr *lineReader) skip(head, chunk []byte, err error) *oversize {
	var sc topScanner
	sc.feed(head)
	sc.feed(chunk)
	size := int64(len(head) + len(chunk))
	for errors.Is(err, bufio.ErrBufferFull) {
		chunk, err = lr.br.ReadSlice('\n')
		sc.feed(chunk)
		size += int64(len(chunk))
	}
	if err == nil {
		size-- // the newline
	}
	o := &oversize{size: size}
	if sc.id != nil && !sc.idBad {
		var v any
		if json.Unmarshal(sc.id, &v) == nil {
			o.id, _ = jsonrpc.MakeID(v)
		}
	}
	if sc.method != nil {
		o.request = true
		if sc.methodBad || json.Unmarshal(sc.method, &o.method) != nil {
			o.method = ""
		}
	}
	return o
}

// trimEnd drops a line's '\n' and a '\r' before it.
func trimEnd(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}

// maxCaptured bounds what topScanner keeps of a key or of the value of
// "id" or "method": an id or a method name longer than that is not one
// the relay answers.
const maxCaptured = 1024

// topScanner picks the raw values of the top-level keys "id" and
// "method" out of a JSON object that arrives in pieces, holding nothing
// else: it follows strings, escapes and nesting byte by byte. It is
// meant for a line the relay refuses as too long, and gives up quietly
// on what is not JSON (the values are then missing or marked bad).
type topScanner struct {
	depth     int
	inString  bool
	escaped   bool
	expectKey bool   // the next string at depth 1 is a key
	inKey     bool   // reading a key at depth 1
	key       []byte // the key being read, or the last one
	keyLong   bool
	target    *[]byte // the value being captured (id or method), if any
	targetBad *bool

	id, method       []byte
	idBad, methodBad bool
}

// feed scans the next bytes of the line.
func (s *topScanner) feed(b []byte) {
	for _, c := range b {
		s.byte(c)
	}
}

func (s *topScanner) byte(c byte) {
	if s.inString {
		s.keep(c)
		switch {
		case s.escaped:
			s.escaped = false
		case c == '\\':
			s.escaped = true
		case c == '"':
			s.inString, s.inKey = false, false
		}
		return
	}
	switch c {
	case ' ', '\t', '\r', '\n':
		return
	case '"':
		s.inString = true
		if s.depth == 1 && s.expectKey {
			s.inKey, s.expectKey = true, false
			s.key, s.keyLong = append(s.key[:0], '"'), false
			return
		}
		s.keep(c)
		return
	case '{', '[':
		if s.depth == 1 && s.target != nil {
			*s.targetBad = true // neither an id nor a method is an object
		}
		s.depth++
		if s.depth == 1 {
			s.expectKey = c == '{'
		}
		return
	case '}', ']':
		if s.depth == 1 {
			s.target = nil
		}
		s.depth--
		return
	case ':':
		if s.depth == 1 && !s.keyLong {
			switch string(s.key) {
			case `"id"`:
				s.id, s.idBad = []byte{}, false
				s.target, s.targetBad = &s.id, &s.idBad
			case `"method"`:
				s.method, s.methodBad = []byte{}, false
				s.target, s.targetBad = &s.method, &s.methodBad
			}
		}
		return
	case ',':
		if s.depth == 1 {
			s.target = nil
			s.expectKey = true
		}
		return
	}
	s.keep(c)
}

// keep adds c to the key or to the value being captured, at depth 1.
func (s *topScanner) keep(c byte) {
	if s.depth != 1 {
		return
	}
	switch {
	case s.inKey:
		if len(s.key) >= maxCaptured {
			s.keyLong = true
			return
		}
		s.key = append(s.key, c)
	case s.target != nil:
		if len(*s.target) >= maxCaptured {
			*s.targetBad = true
			return
		}
		*s.target = append(*s.target, c)
	}
}

// oneValue reports whether line holds one JSON object or array and
// nothing after it but white space, judging only its strings and
// brackets: the line has passed a JSON parser (jsonrpc.DecodeMessage),
// which stops after the first value and ignores what follows.
func oneValue(line []byte) bool {
	depth := 0
	for i := 0; i < len(line); i++ {
		switch line[i] {
		case '"':
			j := i + 1
			for {
				k := bytes.IndexByte(line[j:], '"')
				if k < 0 {
					return false
				}
				j += k
				escapes := 0
				for p := j - 1; p > i && line[p] == '\\'; p-- {
					escapes++
				}
				if escapes%2 == 0 {
					break
				}
				j++
			}
			i = j
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return isBlank(line[i+1:])
			}
		}
	}
	return false
}
