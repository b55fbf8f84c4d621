package kernel

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// protocolVersion is the Jupyter messaging protocol version hutch speaks.
const protocolVersion = "5.3"

// delimiter separates the ZeroMQ routing identities of a Jupyter message
// from its signed parts.
var delimiter = []byte("<IDS|MSG>")

// header is a Jupyter message header (also the parent_header of a reply).
type header struct {
	MsgID    string `json:"msg_id"`
	Session  string `json:"session"`
	Username string `json:"username"`
	Date     string `json:"date"`
	MsgType  string `json:"msg_type"`
	Version  string `json:"version"`
}

// message is a received Jupyter message whose signature was verified.
type message struct {
	Header  header
	Parent  header
	Content json.RawMessage
	size    int
}

// signer signs and verifies the messages of one kernel with its key.
type signer struct {
	key     []byte
	session string
}

// sign returns the hex HMAC-SHA256 over parts, in order: the protocol
// signs header, parent_header, metadata and content.
func (s *signer) sign(parts ...[]byte) []byte {
	m := hmac.New(sha256.New, s.key)
	for _, p := range parts {
		m.Write(p)
	}
	return []byte(hex.EncodeToString(m.Sum(nil)))
}

// encode builds the frames of a new request of msgType with content; it
// returns them and the request's msg_id.
func (s *signer) encode(msgType string, content any) ([][]byte, string, error) {
	id := randomHex(16)
	h, err := json.Marshal(header{
		MsgID: id, Session: s.session, Username: "hutch", MsgType: msgType,
		Date: time.Now().UTC().Format(time.RFC3339Nano), Version: protocolVersion,
	})
	if err != nil {
		return nil, "", err
	}
	c, err := json.Marshal(content)
	if err != nil {
		return nil, "", fmt.Errorf("kernel: encoding %s: %w", msgType, err)
	}
	parent, meta := []byte("{}"), []byte("{}")
	return [][]byte{delimiter, s.sign(h, parent, meta, c), h, parent, meta, c}, id, nil
}

// errBadSignature is returned for a message whose HMAC does not match.
var errBadSignature = errors.New("kernel: message signature does not match")

// decode verifies and parses the frames of a received message. Routing
// identities before the delimiter and binary buffers after the content are
// ignored.
func (s *signer) decode(frames [][]byte) (message, error) {
	i := 0
	for i < len(frames) && !bytes.Equal(frames[i], delimiter) {
		i++
	}
	if len(frames)-i < 6 {
		return message{}, fmt.Errorf("kernel: malformed message: %d frames", len(frames))
	}
	f := frames[i+1:]
	if !hmac.Equal(s.sign(f[1], f[2], f[3], f[4]), f[0]) {
		return message{}, errBadSignature
	}
	var m message
	if err := json.Unmarshal(f[1], &m.Header); err != nil {
		return message{}, fmt.Errorf("kernel: malformed header: %w", err)
	}
	if err := json.Unmarshal(f[2], &m.Parent); err != nil {
		return message{}, fmt.Errorf("kernel: malformed parent_header: %w", err)
	}
	m.Content = f[4]
	return m, nil
}

// frameSize is the total length of a message's frames.
func frameSize(frames [][]byte) int {
	n := 0
	for _, f := range frames {
		n += len(f)
	}
	return n
}

// parentID returns the parent msg_id of a message without verifying it,
// for naming the execution an oversized message belonged to. It returns ""
// when the frames do not have that shape or the parent header is itself
// large.
func parentID(frames [][]byte) string {
	i := 0
	for i < len(frames) && !bytes.Equal(frames[i], delimiter) {
		i++
	}
	if len(frames)-i < 6 || len(frames[i+3]) > 64<<10 {
		return ""
	}
	var h header
	if json.Unmarshal(frames[i+3], &h) != nil {
		return ""
	}
	return h.MsgID
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}
