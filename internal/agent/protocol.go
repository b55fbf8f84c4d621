package agent

import (
	"bufio"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"
)

// Frame types.
const (
	frameHello    byte = 1
	frameRequest  byte = 2
	frameResponse byte = 3
	frameData     byte = 4
	frameEOF      byte = 5
	frameCredit   byte = 6
	frameCancel   byte = 7
	frameExit     byte = 8
	frameEntries  byte = 9
	frameEvents   byte = 10
	frameAttach   byte = 11
)

// Streams.
const (
	streamIn  byte = 0 // stdin, or the content of a write
	streamOut byte = 1 // stdout, or the content of a read
	streamErr byte = 2 // stderr
)

const (
	protocolVersion = 1
	lenSize         = 4 // the length prefix
	headerSize      = 6 // type, stream, id
	prefixSize      = lenSize + headerSize

	// maxChunk bounds the body of a data frame.
	maxChunk = 64 << 10
	// window is the number of bytes a sender may have outstanding on one
	// stream before the receiver grants more.
	window = 256 << 10
	// defaultMaxFrame is the agent's frame limit when ServeOptions.MaxFrame
	// is 0, and always the client's.
	defaultMaxFrame = 1 << 20
	// minMaxFrame is the smallest frame limit that holds a full data chunk.
	minMaxFrame = headerSize + maxChunk
	// maxMaxFrame bounds the limit a client believes an agent's hello.
	maxMaxFrame = 64 << 20
	// entriesBatch bounds the body of an entries frame the agent sends.
	entriesBatch = 60 << 10
	// maxListBytes and maxListEntries bound one list or ps result.
	maxListBytes   = 16 << 20
	maxListEntries = 100_000
	// maxWatchPath bounds the path of a watch event (PATH_MAX).
	maxWatchPath = 4096
	// maxPSArgs bounds the arguments of one process in a ps result.
	maxPSArgs = 4 << 10
	// maxMessage bounds an error message the client keeps.
	maxMessage = 4 << 10
	// maxLink bounds a symlink target (PATH_MAX).
	maxLink = 4096
	// maxName bounds a file name (NAME_MAX).
	maxName = 255
	// maxXattrs and maxXattrBytes bound the extended attributes of one
	// file in a file info (names without the prefix, and values).
	maxXattrs     = 64
	maxXattrBytes = 8 << 10
	// exitGrace is how long the agent holds a command's exit frame back
	// for output still in flight.
	exitGrace = 250 * time.Millisecond
)

var (
	// ErrProtocol is wrapped by the errors of a connection that ended
	// because the peer broke the protocol: a malformed or oversized frame,
	// a field out of range, more data than the window allows.
	ErrProtocol = errors.New("agent protocol violation")
	// ErrClosed is wrapped by the errors of calls on a client whose
	// connection is closed, by Close or by the agent.
	ErrClosed = errors.New("agent connection closed")
	// ErrNotSupported is wrapped by Serve's error when PID1 is asked for
	// off Linux, where commands cannot run either.
	ErrNotSupported = errors.New("agent not supported on this platform")
)

// frame is one decoded frame.
type frame struct {
	typ    byte
	stream byte
	id     uint32
	body   []byte
}

// readFrame reads one frame of at most limit payload bytes. It returns
// io.EOF only when the connection ended cleanly between frames.
func readFrame(r *bufio.Reader, limit int) (frame, error) {
	var lb [lenSize]byte
	if _, err := io.ReadFull(r, lb[:]); err != nil {
		return frame{}, err
	}
	n := binary.BigEndian.Uint32(lb[:])
	if n < headerSize || uint64(n) > uint64(limit) {
		return frame{}, fmt.Errorf("%w: frame of %d bytes (limit %d)", ErrProtocol, n, limit)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return frame{}, fmt.Errorf("read frame: %w", err)
	}
	return frame{typ: buf[0], stream: buf[1], id: binary.BigEndian.Uint32(buf[2:6]), body: buf[headerSize:]}, nil
}

// putPrefix writes the length prefix and header of a frame whose body is
// bodyLen bytes into b[:prefixSize].
func putPrefix(b []byte, typ, stream byte, id uint32, bodyLen int) {
	binary.BigEndian.PutUint32(b[0:4], uint32(headerSize+bodyLen))
	b[4] = typ
	b[5] = stream
	binary.BigEndian.PutUint32(b[6:10], id)
}

// encodeFrame returns a whole frame with body.
func encodeFrame(typ, stream byte, id uint32, body []byte) []byte {
	b := make([]byte, prefixSize+len(body))
	putPrefix(b, typ, stream, id, len(body))
	copy(b[prefixSize:], body)
	return b
}

// creditFrame returns a credit frame granting n bytes.
func creditFrame(stream byte, id uint32, n int) []byte {
	var body [4]byte
	binary.BigEndian.PutUint32(body[:], uint32(n))
	return encodeFrame(frameCredit, stream, id, body[:])
}

// jsonFrame returns a frame whose body is v in JSON.
func jsonFrame(typ byte, id uint32, v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode frame: %w", err)
	}
	return encodeFrame(typ, 0, id, body), nil
}

// Operations.
const (
	opExec    = "exec"
	opSignal  = "signal"
	opResize  = "resize"
	opPS      = "ps"
	opRead    = "read"
	opWrite   = "write"
	opStat    = "stat"
	opList    = "list"
	opMkdir   = "mkdir"
	opRemove  = "remove"
	opRename  = "rename"
	opChown   = "chown"
	opWatch   = "watch"
	opDetach  = "detach"
	opKillAll = "killall"
	opUsage   = "usage"
	opLayer   = "layer"
)

// wireEvent is a WatchEvent on the wire.
type wireEvent struct {
	Op   string `json:"op"`
	Path wstr   `json:"path"`
	Dir  bool   `json:"dir,omitempty"`
}

// hello is the agent's first frame, and its answer to an attach.
type hello struct {
	Version  int `json:"version"`
	MaxFrame int `json:"max_frame"`
	// FirstID is the lowest request id the client may use, above those
	// of the requests a detach left running (0: any).
	FirstID uint32 `json:"first_id,omitempty"`
}

// request is the body of every request; each op uses some of the fields.
type request struct {
	Op string `json:"op"`

	// exec
	Args    []wstr `json:"args,omitempty"`
	Env     []wstr `json:"env,omitempty"`
	Dir     wstr   `json:"dir,omitempty"`
	Stdin   bool   `json:"stdin,omitempty"`
	TTY     bool   `json:"tty,omitempty"`
	Rows    uint16 `json:"rows,omitempty"`
	Cols    uint16 `json:"cols,omitempty"`
	Timeout int64  `json:"timeout_ns,omitempty"`
	// exec as another user; chown
	UID *uint32 `json:"uid,omitempty"`
	GID *uint32 `json:"gid,omitempty"`

	// signal, resize (with Rows, Cols)
	Target uint32 `json:"target,omitempty"`
	Signal int    `json:"signal,omitempty"`

	// files
	Path      wstr   `json:"path,omitempty"`
	To        wstr   `json:"to,omitempty"`
	Mode      uint32 `json:"mode,omitempty"`
	Parents   bool   `json:"parents,omitempty"`
	Recursive bool   `json:"recursive,omitempty"`
	// write: in place (see WriteOptions.InPlace)
	InPlace bool `json:"in_place,omitempty"`
	// stat, list: the extended attributes whose names start with
	// XattrPrefix go in the file infos; write: they are replaced by
	// Xattrs (keys without the prefix).
	XattrPrefix wstr            `json:"xattr_prefix,omitempty"`
	Xattrs      map[string]wstr `json:"xattrs,omitempty"`
}

// response is the body of every response.
type response struct {
	Error *Error    `json:"error,omitempty"`
	PID   int       `json:"pid,omitempty"`
	Size  int64     `json:"size,omitempty"`
	Info  *wireInfo `json:"info,omitempty"`
	Usage *Usage    `json:"usage,omitempty"`
}

// Usage is what the agent's cgroup — its sandbox's, every process of it
// included — has used (Client.Usage).
type Usage struct {
	// CPU is the CPU time used, in nanoseconds, since the cgroup was
	// made.
	CPU int64 `json:"cpu_ns"`
	// Memory is the memory charged to it now (page cache included);
	// MemoryCache the part of it that is page cache and tmpfs.
	Memory      int64 `json:"memory"`
	MemoryCache int64 `json:"memory_cache"`
}

// exitMsg is the body of an exit frame.
type exitMsg struct {
	Code     int  `json:"code"`
	Signal   int  `json:"signal"`
	TimedOut bool `json:"timed_out,omitempty"`
}

// wireInfo is a FileInfo on the wire.
type wireInfo struct {
	Name    wstr   `json:"name"`
	Size    int64  `json:"size"`
	Mode    uint32 `json:"mode"`
	ModTime int64  `json:"mtime_ns"`
	Link    wstr   `json:"link,omitempty"`
	UID     uint32 `json:"uid"`
	GID     uint32 `json:"gid"`
	// Xattrs are the extended attributes the request's XattrPrefix
	// asked for, keyed without it.
	Xattrs map[string]wstr `json:"xattrs,omitempty"`
}

// wireProc is a ProcessInfo on the wire.
type wireProc struct {
	PID     int    `json:"pid"`
	Args    []wstr `json:"args"`
	Started int64  `json:"started_ns"`
}

// wstr is a string that survives JSON whatever its bytes: valid UTF-8 is a
// JSON string, anything else {"b": base64}.
type wstr string

// MarshalJSON implements json.Marshaler.
func (s wstr) MarshalJSON() ([]byte, error) {
	if utf8.ValidString(string(s)) {
		return json.Marshal(string(s))
	}
	return json.Marshal(struct {
		B []byte `json:"b"`
	}{[]byte(s)})
}

// UnmarshalJSON implements json.Unmarshaler.
func (s *wstr) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '{' {
		var v struct {
			B *string `json:"b"`
		}
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		if v.B == nil {
			return errors.New("string object without b")
		}
		raw, err := base64.StdEncoding.DecodeString(*v.B)
		if err != nil {
			return fmt.Errorf("string object: %w", err)
		}
		*s = wstr(raw)
		return nil
	}
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = wstr(v)
	return nil
}

func toWire(ss []string) []wstr {
	if ss == nil {
		return nil
	}
	out := make([]wstr, len(ss))
	for i, s := range ss {
		out[i] = wstr(s)
	}
	return out
}

func fromWire(ws []wstr) []string {
	if ws == nil {
		return nil
	}
	out := make([]string, len(ws))
	for i, s := range ws {
		out[i] = string(s)
	}
	return out
}
