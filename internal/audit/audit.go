// Package audit keeps the daemon's audit log: one JSON line per API call
// that changed something and per command run, in a hash chain that makes
// any later edit, insertion, removal or reordering of lines detectable.
// hutch mcp wrap keeps one too (--audit), a line per tools/call.
//
// Every line is a JSON object with "seq" (1, 2, …), "prev" (the lowercase
// hex SHA-256 of the previous line's exact bytes, without its newline; 64
// zeros for the first line) and the fields of an Entry. The hash of a line
// is the SHA-256 of its exact bytes without the newline.
//
// The chain alone cannot tell that lines were cut off the end of the log
// (Verify reports how many lines it checked, for comparison with a count
// kept elsewhere), nor that the last line was rewritten into another valid
// line; every other change is found by Verify.
//
// Entries never hold file contents, environment values or policy secrets:
// only who did what to which sandbox and, for commands, their arguments
// and how they ended (for tool calls, the size of their arguments only).
package audit

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/internal/approve"
)

// FileName is the log's file name in the daemon's state directory.
const FileName = "audit.jsonl"

// zeroHash is the prev of the first line: as many zeros as a SHA-256 has
// hex digits (a constant, not built during package initialization).
const zeroHash = "0000000000000000000000000000000000000000000000000000000000000000"

// Entry is one audited event.
type Entry struct {
	// Time is when the call was made.
	Time time.Time `json:"time"`
	// Tenant is the tenant that made it.
	Tenant string `json:"tenant"`
	// Action is what it did: "create", "destroy", "extend", "pause",
	// "resume", "connect", "exec", "stdin", "close_stdin", "resize",
	// "signal", "write_file", "remove", "rename", "mkdir", "upload",
	// "watch", "unwatch", "create_token", "pull_image", "remove_image",
	// "run_code", "create_code_context", "remove_code_context",
	// "restart_code_context",
	// "approval" (a decision of the approval layer: Approval),
	// "take_back" (a restarted daemon, or one whose connection to the
	// sandbox was lost, took it again), "take_over" (a replica took over
	// a sandbox of a replica gone)
	// (the front ends' route tables say which route records which), or
	// "mcp_call": a call of an MCP tool on /mcp, or of a server's tool
	// through hutch mcp wrap (Tool names it).
	Action string `json:"action"`
	// Tool is the MCP tool an mcp_call called ("exec", "file_write" …;
	// under hutch mcp wrap, the server's).
	Tool string `json:"tool,omitempty"`
	// Sandbox is the sandbox it acted on ("" when none, e.g. a create
	// that failed).
	Sandbox string `json:"sandbox,omitempty"`
	// Subject is the tenant a token was made for (create_token; the
	// token itself is never recorded), the image a pull or removal names
	// (pull_image, remove_image), the snapshot a snapshot or its deletion
	// names (snapshot, delete_snapshot), the sandboxes a fork made, where
	// a sandbox taken back runs (take_back: "this machine" or the
	// cluster's) or the replica it was taken over from (take_over).
	Subject string `json:"subject,omitempty"`
	// Image is the digest of the image a created sandbox started from.
	Image string `json:"image,omitempty"`
	// Tier is the isolation tier of a created sandbox or, for a create
	// refused, the tier its policy named.
	Tier string `json:"tier,omitempty"`
	// Command is the arguments of an exec (or an mcp_call of exec).
	Command []string `json:"command,omitempty"`
	// Paths are the files a file call (or an mcp_call of file_write or
	// file_edit) wrote, made, moved (from, to) or removed, as the sandbox
	// names them.
	Paths []string `json:"paths,omitempty"`
	// ExitCode is how an exec's command ended (nil if it did not run to
	// its end).
	ExitCode *int `json:"exit_code,omitempty"`
	// DurationMS is how long an exec's command ran, or an mcp_call took,
	// in milliseconds.
	DurationMS int64 `json:"duration_ms,omitempty"`
	// BytesIn is how many bytes of stdin an exec's command was given, or
	// the size of an mcp_call's arguments (their JSON).
	BytesIn int64 `json:"bytes_in,omitempty"`
	// BytesOut is how many bytes of output (stdout and stderr) an exec's
	// command produced.
	BytesOut int64 `json:"bytes_out,omitempty"`
	// Approval is an approval decision (Action "approval"): whether a
	// command or a host was allowed, by which rule, who answered and how
	// long the question waited.
	Approval *approve.Record `json:"approval,omitempty"`
	// Error is the API's error code when the call failed; for an
	// mcp_call whose tool error is of none of its categories, "tool_error"
	// (under hutch mcp wrap, how a call that did not end with a result
	// ended: "tool_error", "error CODE", "cancelled", "no_answer").
	Error string `json:"error,omitempty"`
}

// line is the JSON form of a line of the log.
type line struct {
	Seq  uint64 `json:"seq"`
	Prev string `json:"prev"`
	Entry
}

// Log is an open audit log. Its methods are safe for concurrent use.
type Log struct {
	mu   sync.Mutex
	f    *os.File
	seq  uint64 // of the last line written
	prev string // hash of the last line written
}

// Open opens the log at path for appending, creating it with mode 0600 if
// missing. It reads the last line to continue the chain; a log whose last
// line is incomplete or not a line of the chain is an error (run Verify to
// learn more).
func Open(path string) (*Log, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	last, err := lastLine(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("audit: %s: %w", path, err)
	}
	l := &Log{f: f, prev: zeroHash}
	if last != nil {
		var ln line
		if err := json.Unmarshal(last, &ln); err != nil || ln.Seq == 0 || !isHash(ln.Prev) {
			f.Close()
			return nil, fmt.Errorf("audit: %s: the last line is not a line of the log; run hutch audit verify", path)
		}
		l.seq, l.prev = ln.Seq, hashOf(last)
	}
	return l, nil
}

// lastLine returns the last line of f without its newline, nil if f is
// empty. It reads backwards from the end.
func lastLine(f *os.File) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := fi.Size()
	if size == 0 {
		return nil, nil
	}
	var tail [1]byte
	if _, err := f.ReadAt(tail[:], size-1); err != nil {
		return nil, err
	}
	if tail[0] != '\n' {
		return nil, errors.New("the last line is incomplete (no newline); run hutch audit verify")
	}
	end := size - 1 // the newline
	var buf []byte
	pos := end
	chunk := make([]byte, 4096)
	for pos > 0 {
		n := min(int64(len(chunk)), pos)
		pos -= n
		if _, err := f.ReadAt(chunk[:n], pos); err != nil {
			return nil, err
		}
		buf = append(append([]byte(nil), chunk[:n]...), buf...)
		if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
			return buf[i+1:], nil
		}
	}
	return buf, nil
}

// Append writes e as the next line and syncs the file before it returns:
// every entry is on disk once Append returned nil. A zero e.Time is set to
// now.
func (l *Log) Append(e Entry) error {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	e.Time = e.Time.UTC()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return errors.New("audit: the log is closed")
	}
	b, err := json.Marshal(line{Seq: l.seq + 1, Prev: l.prev, Entry: e})
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	if _, err := l.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	l.seq, l.prev = l.seq+1, hashOf(b)
	return nil
}

// Close closes the log.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// VerifyError is the error of Verify: the first line found bad.
type VerifyError struct {
	// Line is the number of the bad line, from 1.
	Line int
	// Reason says what is wrong with it.
	Reason string
}

// Error names the line and the reason.
func (e *VerifyError) Error() string {
	return fmt.Sprintf("line %d: %s", e.Line, e.Reason)
}

// Verify reads a log and checks its chain. It returns the number of lines
// it found good and, if one is not, a *VerifyError naming the first bad
// line: one that is incomplete or not JSON, whose seq is not its line
// number, or whose hash does not match the next line's prev (it was
// edited, or the next line's prev was).
func Verify(r io.Reader) (n int, err error) {
	br := bufio.NewReader(r)
	prev := zeroHash
	var prevLine []byte
	for {
		b, rerr := br.ReadBytes('\n')
		if len(b) == 0 && rerr == io.EOF {
			return n, nil
		}
		if rerr != nil && rerr != io.EOF {
			return n, rerr
		}
		num := n + 1
		if rerr == io.EOF {
			return n, &VerifyError{num, "incomplete line (no newline): the log was cut or is being written"}
		}
		b = b[:len(b)-1]
		var ln line
		if err := json.Unmarshal(b, &ln); err != nil {
			return n, &VerifyError{num, "not a JSON line of the log: " + err.Error()}
		}
		if ln.Seq != uint64(num) {
			return n, &VerifyError{num, fmt.Sprintf("seq is %d, want %d: lines were removed, inserted or reordered", ln.Seq, num)}
		}
		if ln.Prev != prev {
			if prevLine != nil && isHash(ln.Prev) {
				// The seqs are in order, so the previous line's bytes changed
				// (or this line's prev did).
				return n - 1, &VerifyError{num - 1, fmt.Sprintf("its hash does not match the prev of line %d: line %d was edited (or line %d's prev was)", num, num-1, num)}
			}
			return n, &VerifyError{num, "prev does not match the hash of the previous line"}
		}
		prev, prevLine = hashOf(b), b
		n++
	}
}

// hashOf is the hex SHA-256 of a line's bytes.
func hashOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// isHash reports whether s looks like the output of hashOf.
func isHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}
