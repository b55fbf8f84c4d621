package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hutch-sandbox/hutch/internal/agent"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// File bounds.
const (
	// MaxImage bounds an image file_read returns as an image; a larger
	// one gets a link.
	MaxImage = 4 << 20
	// MaxWrite bounds the content of file_write, decoded.
	MaxWrite = 64 << 20
	// MaxEdit bounds the size of a file file_edit edits.
	MaxEdit = 16 << 20
	// MaxListDepth bounds file_list's depth.
	MaxListDepth = 5
	// MaxListEntries bounds the entries file_list returns.
	MaxListEntries = 1000
	// maxLinks bounds the symlinks followed to reach a file.
	maxLinks = 40
	// sniffLen is how much of a file tells text from binary.
	sniffLen = 8 << 10
)

// FileReadIn is file_read's arguments.
type FileReadIn struct {
	Path      string `json:"path" jsonschema:"the file; relative to the sandbox's workspace unless absolute"`
	Offset    int    `json:"offset,omitempty" jsonschema:"the first line to return, 1-based (default 1)"`
	Limit     int    `json:"limit,omitempty" jsonschema:"how many lines to return (default: all, up to the server's cap)"`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox; may be left out where a session sandbox is the default"`
}

// FileReadOut is file_read's result.
type FileReadOut struct {
	Path       string `json:"path" jsonschema:"the file's absolute path in the sandbox (symlinks followed)"`
	Kind       string `json:"kind" jsonschema:"text, image or binary"`
	Size       int64  `json:"size" jsonschema:"the file's size in bytes"`
	MIMEType   string `json:"mime_type" jsonschema:"the type the file's content looks like"`
	Content    string `json:"content,omitempty" jsonschema:"for text: the lines asked for, as they are in the file"`
	StartLine  int    `json:"start_line,omitempty" jsonschema:"for text: the number of the first line in content"`
	EndLine    int    `json:"end_line,omitempty" jsonschema:"for text: the number of the last line in content"`
	TotalLines int    `json:"total_lines,omitempty" jsonschema:"for text: the lines of the file, when the read reached its end"`
	Truncated  bool   `json:"truncated,omitempty" jsonschema:"true: content stops before the lines asked for, at the server's cap; read on with offset=end_line+1"`
	URL        string `json:"url,omitempty" jsonschema:"an HTTP URL with the file's bytes (valid 30 minutes), for a binary file or text cut short"`
}

// FileWriteIn is file_write's arguments.
type FileWriteIn struct {
	Path      string `json:"path" jsonschema:"the file; relative to the sandbox's workspace unless absolute; missing parent directories are created"`
	Content   string `json:"content" jsonschema:"the file's whole new content"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"text (the default): content is the text; base64: content is the bytes, base64-encoded (for binary files)"`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox; may be left out where a session sandbox is the default"`
}

// FileWriteOut is file_write's result.
type FileWriteOut struct {
	Path    string `json:"path" jsonschema:"the file's absolute path in the sandbox"`
	Bytes   int64  `json:"bytes" jsonschema:"the bytes written"`
	Created bool   `json:"created" jsonschema:"true: the file did not exist before"`
}

// FileEditIn is file_edit's arguments.
type FileEditIn struct {
	Path       string `json:"path" jsonschema:"the file; relative to the sandbox's workspace unless absolute"`
	OldString  string `json:"old_string" jsonschema:"the exact text to replace, whitespace and indentation included; it must occur exactly once unless replace_all"`
	NewString  string `json:"new_string" jsonschema:"the text to put in its place"`
	ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"replace every occurrence of old_string, not just the one"`
	SandboxID  string `json:"sandbox_id,omitempty" jsonschema:"the sandbox; may be left out where a session sandbox is the default"`
}

// FileEditOut is file_edit's result.
type FileEditOut struct {
	Path         string `json:"path" jsonschema:"the file's absolute path in the sandbox"`
	Replacements int    `json:"replacements" jsonschema:"how many occurrences were replaced"`
	Bytes        int64  `json:"bytes" jsonschema:"the file's size afterwards"`
}

// FileListIn is file_list's arguments.
type FileListIn struct {
	Path      string `json:"path,omitempty" jsonschema:"the directory; relative to the sandbox's workspace unless absolute; the workspace when absent"`
	Depth     int    `json:"depth,omitempty" jsonschema:"how many levels to descend: 1 (the default) lists the directory's own entries, at most 5"`
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox; may be left out where a session sandbox is the default"`
}

// FileListOut is file_list's result.
type FileListOut struct {
	Path      string      `json:"path" jsonschema:"the listed directory's absolute path in the sandbox"`
	Entries   []FileEntry `json:"entries" jsonschema:"the entries, sorted by path"`
	Truncated bool        `json:"truncated,omitempty" jsonschema:"true: there were more entries than the server returns (1000); list a subdirectory or a smaller depth"`
}

// FileEntry is an entry of file_list.
type FileEntry struct {
	Path   string    `json:"path" jsonschema:"the path relative to the listed directory"`
	Type   string    `json:"type" jsonschema:"file, dir, symlink or other (a device, FIFO or socket)"`
	Size   int64     `json:"size" jsonschema:"the size in bytes"`
	Mode   string    `json:"mode" jsonschema:"the permission bits, octal (0644)"`
	MTime  time.Time `json:"mtime" jsonschema:"when it was last modified (RFC 3339)"`
	Target string    `json:"target,omitempty" jsonschema:"for a symlink: what it points to"`
	Error  string    `json:"error,omitempty" jsonschema:"for a directory that could not be listed: why"`
}

func (t *tools) addFileTools(s *sdk.Server) {
	addTool(s, t.tool("file_read", "Read a file",
		"Read a file in a sandbox. Text comes back as it is in the file, by lines: offset (1-based) and limit select a range; "+
			"a file larger than the server's cap (64 KiB by default) is cut at a line, with truncated=true, end_line and a url for the whole file. "+
			"PNG, JPEG, GIF and WebP images up to 4 MiB come back as images; other binary files are described (size, type) with a url for their bytes.",
		true, false, true, false), t.fileRead)
	addTool(s, t.tool("file_write", "Write a file",
		"Create a file in a sandbox, or replace its whole content, creating missing parent directories. "+
			"Text by default; encoding=base64 for binary content (at most 64 MiB). A symlink is followed; an existing file keeps its mode and owner. "+
			"To change part of a file, file_edit is safer.",
		false, true, true, false), t.fileWrite)
	addTool(s, t.tool("file_edit", "Edit a file",
		"Replace an exact string in a file in a sandbox: old_string must occur exactly once (or set replace_all), "+
			"matched byte for byte, whitespace and indentation included; the call fails, changing nothing, when it occurs zero times or more than once. "+
			"The file keeps its mode and owner.",
		false, true, false, false), t.fileEdit)
	addTool(s, t.tool("file_list", "List a directory",
		"List a directory in a sandbox: each entry's path, type (file, dir, symlink), size, mode, modification time and a symlink's target. "+
			"depth descends into subdirectories (default 1, at most 5; symlinks are not followed); at most 1000 entries.",
		true, false, true, false), t.fileList)
}

// follow resolves symlinks at p (not above it: the agent's kernel
// resolves those) and describes what p ends at. A missing file is no
// error when missingOK: the zero FileInfo says so.
func follow(ctx context.Context, ac *agent.Client, p string, missingOK bool) (string, agent.FileInfo, error) {
	for range maxLinks {
		fi, err := ac.Stat(ctx, p)
		if errors.Is(err, fs.ErrNotExist) && missingOK {
			return p, agent.FileInfo{}, nil
		}
		if err != nil {
			return p, fi, err
		}
		if fi.Mode&fs.ModeSymlink == 0 {
			return p, fi, nil
		}
		target := fi.Link
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(p), target)
		}
		p = path.Clean(target)
	}
	return p, agent.FileInfo{}, fmt.Errorf("%s: more than %d symlinks to follow", p, maxLinks)
}

// regular fails unless fi describes a regular file.
func regular(p string, fi agent.FileInfo) error {
	switch {
	case fi.IsDir:
		return fmt.Errorf("%s is a directory (file_list lists it)", p)
	case !fi.Mode.IsRegular():
		return fmt.Errorf("%s is not a regular file (a device, FIFO or socket)", p)
	}
	return nil
}

// errStop ends a read that has what it needs.
var errStop = errors.New("enough")

// capWriter keeps the first max bytes and stops the read there.
type capWriter struct {
	buf []byte
	max int
}

func (w *capWriter) Write(b []byte) (int, error) {
	room := w.max - len(w.buf)
	if len(b) >= room {
		w.buf = append(w.buf, b[:room]...)
		return room, errStop
	}
	w.buf = append(w.buf, b...)
	return len(b), nil
}

// readUpTo reads the first max bytes of the file at p.
func readUpTo(ctx context.Context, ac *agent.Client, p string, max int) ([]byte, error) {
	w := &capWriter{max: max}
	if _, err := ac.ReadFile(ctx, p, w); err != nil && !errors.Is(err, errStop) {
		return nil, err
	}
	return w.buf, nil
}

// imageType is the MIME type of an image file_read returns as an image,
// by its first bytes; "" for anything else.
func imageType(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
		return "image/png"
	case bytes.HasPrefix(b, []byte("\xff\xd8\xff")):
		return "image/jpeg"
	case bytes.HasPrefix(b, []byte("GIF87a")), bytes.HasPrefix(b, []byte("GIF89a")):
		return "image/gif"
	case len(b) >= 12 && string(b[:4]) == "RIFF" && string(b[8:12]) == "WEBP":
		return "image/webp"
	}
	return ""
}

// isText reports whether a file that starts with b (all of it, if whole)
// reads as text: UTF-8 without NUL bytes.
func isText(b []byte, whole bool) bool {
	if !whole {
		b = b[:len(b)-incompleteSuffix(b)]
	}
	return bytes.IndexByte(b, 0) < 0 && utf8.Valid(b)
}

// publishFile links to the bytes of the file at p in sandbox id, read
// when the link is fetched. It returns "" when the server publishes no
// links.
func (t *tools) publishFile(id, p string) string {
	if t.o.Links == nil {
		return ""
	}
	u, err := t.o.Links.Publish(t.o.Owner, t.o.LinkBase, path.Base(p), "application/octet-stream", -1, func(ctx context.Context, w io.Writer) error {
		ac, err := t.o.Backend.Agent(ctx, id)
		if err != nil {
			return err
		}
		_, err = ac.ReadFile(ctx, p, w)
		return err
	})
	if err != nil {
		t.o.Log.Warn("publish file", "path", p, "err", err)
		return ""
	}
	return u
}

func (t *tools) fileRead(ctx context.Context, _ *sdk.CallToolRequest, in FileReadIn) (*sdk.CallToolResult, FileReadOut, error) {
	if in.Offset < 0 || in.Limit < 0 {
		return nil, FileReadOut{}, fmt.Errorf("offset %d, limit %d: want positive numbers (or 0 for the defaults)", in.Offset, in.Limit)
	}
	sb, ac, err := t.agentOf(ctx, in.SandboxID)
	if err != nil {
		return nil, FileReadOut{}, err
	}
	p, err := resolve(sb, "path", in.Path)
	if err != nil {
		return nil, FileReadOut{}, err
	}
	p, fi, err := follow(ctx, ac, p, false)
	if err != nil {
		return nil, FileReadOut{}, err
	}
	if err := regular(p, fi); err != nil {
		return nil, FileReadOut{}, err
	}
	// A small file is read whole; of a larger one, its start says what
	// it is.
	whole := fi.Size <= MaxImage
	n := sniffLen
	if whole {
		n = MaxImage + 1
	}
	head, err := readUpTo(ctx, ac, p, n)
	if err != nil {
		return nil, FileReadOut{}, err
	}
	whole = len(head) <= MaxImage // the file may have changed since
	out := FileReadOut{Path: p, Size: max(fi.Size, int64(len(head))), MIMEType: http.DetectContentType(head)}
	if typ := imageType(head); typ != "" && whole {
		out.Kind, out.MIMEType, out.Size = "image", typ, int64(len(head))
		return &sdk.CallToolResult{Content: []sdk.Content{
			&sdk.TextContent{Text: fmt.Sprintf("%s: %s image, %d bytes", p, typ, len(head))},
			&sdk.ImageContent{Data: head, MIMEType: typ},
		}}, out, nil
	}
	if !isText(head, whole) {
		out.Kind = "binary"
		out.URL = t.publishFile(sb.ID, p)
		msg := fmt.Sprintf("%s is a binary file (%d bytes, %s), not shown", p, out.Size, out.MIMEType)
		if imageType(head) != "" {
			msg = fmt.Sprintf("%s is an image larger than %d bytes (%d bytes, %s), not shown", p, MaxImage, out.Size, out.MIMEType)
		}
		return t.linked(msg, out.URL, p, out.Size), out, nil
	}
	out.Kind = "text"
	sel := &lineSel{first: max(in.Offset, 1), max: t.o.MaxOutput}
	if in.Limit > 0 {
		sel.last = sel.first + in.Limit - 1
	}
	eof := true // the whole file went through sel
	if whole {
		_, err = sel.Write(head)
		out.TotalLines = countLines(head)
	} else {
		_, err = ac.ReadFile(ctx, p, sel)
		if errors.Is(err, errStop) {
			eof = false
		} else if err == nil {
			out.TotalLines = sel.lines()
		}
	}
	if err != nil && !errors.Is(err, errStop) {
		return nil, FileReadOut{}, err
	}
	eof = eof && (whole || err == nil)
	if sel.start == 0 && sel.first > 1 {
		if whole || eof {
			return nil, FileReadOut{}, fmt.Errorf("offset %d: %s has %d lines", sel.first, p, out.TotalLines)
		}
		return nil, FileReadOut{}, fmt.Errorf("offset %d: beyond the end of %s", sel.first, p)
	}
	content := sel.buf
	if sel.cut {
		content = content[:len(content)-incompleteSuffix(content)]
	}
	out.Content, out.StartLine, out.EndLine, out.Truncated = string(content), sel.start, sel.end, sel.cut
	note := ""
	switch {
	case out.Size == 0:
		note = "[" + p + " is empty]"
	case sel.cut && sel.lineCut:
		out.URL = t.publishFile(sb.ID, p)
		note = fmt.Sprintf("[line %d is longer than %d bytes: cut; the whole file: %s]", sel.end, t.o.MaxOutput, orNone(out.URL))
	case sel.cut:
		out.URL = t.publishFile(sb.ID, p)
		note = fmt.Sprintf("[lines %d-%d shown, cut at %d bytes: file_read with offset=%d goes on; the whole file: %s]", sel.start, sel.end, t.o.MaxOutput, sel.end+1, orNone(out.URL))
	}
	if note == "" {
		return text(out.Content), out, nil
	}
	body := out.Content
	if body != "" && !strings.HasSuffix(body, "\n") {
		body += "\n"
	}
	res := text(body + note)
	if out.URL != "" {
		res.Content = append(res.Content, fileLink(out.URL, p, out.Size))
	}
	return res, out, nil
}

// orNone is u, or a sentence saying there is no link.
func orNone(u string) string {
	if u == "" {
		return "no link, this server publishes none"
	}
	return u
}

// linked is a result saying msg, with a link to the file at p if u is
// one.
func (t *tools) linked(msg, u, p string, size int64) *sdk.CallToolResult {
	if u == "" {
		return text(msg + "; this server publishes no links: inspect it with exec (file, xxd, base64)")
	}
	return text(msg+"; its bytes: "+u, fileLink(u, p, size))
}

func fileLink(u, p string, size int64) *sdk.ResourceLink {
	return &sdk.ResourceLink{URI: u, Name: path.Base(p), Description: "the bytes of " + p, MIMEType: "application/octet-stream", Size: &size}
}

// lineSel keeps lines first to last (0: to the end) of what it is
// written, max bytes of them at most; past that, it stops (errStop) with
// the whole lines that fit (or, if the first does not fit, the start of
// it).
type lineSel struct {
	first, last, max int
	line             int // the current line, 1-based
	midLine          bool
	lineStart        int // where the current line starts in buf
	buf              []byte
	start, end       int // the lines in buf
	cut, lineCut     bool
	stopped          bool
}

func (s *lineSel) Write(b []byte) (int, error) {
	if s.line == 0 {
		s.line = 1
	}
	n := 0
	for len(b) > 0 {
		if s.stopped {
			return n, errStop
		}
		seg := b
		i := bytes.IndexByte(b, '\n')
		if i >= 0 {
			seg = b[:i+1]
		}
		if s.line >= s.first && (s.last == 0 || s.line <= s.last) {
			if !s.midLine {
				s.lineStart = len(s.buf)
				if s.start == 0 {
					s.start = s.line
				}
			}
			if len(s.buf)+len(seg) > s.max {
				if s.lineStart == 0 {
					s.buf = append(s.buf, seg[:s.max-len(s.buf)]...)
					s.end, s.lineCut = s.line, true
				} else {
					s.buf = s.buf[:s.lineStart]
					s.end = s.line - 1
				}
				s.cut, s.stopped = true, true
				return n, errStop
			}
			s.buf = append(s.buf, seg...)
			s.end = s.line
		}
		n += len(seg)
		b = b[len(seg):]
		s.midLine = i < 0
		if i >= 0 {
			s.line++
			if s.last != 0 && s.line > s.last {
				s.stopped = true
			}
		}
	}
	return n, nil
}

// countLines is the number of lines of b (the last may lack its newline).
func countLines(b []byte) int {
	n := bytes.Count(b, []byte("\n"))
	if len(b) > 0 && b[len(b)-1] != '\n' {
		n++
	}
	return n
}

// lines is the number of lines written, once the whole file was.
func (s *lineSel) lines() int {
	if s.line == 0 {
		return 0
	}
	if s.midLine {
		return s.line
	}
	return s.line - 1
}

func (t *tools) fileWrite(ctx context.Context, _ *sdk.CallToolRequest, in FileWriteIn) (*sdk.CallToolResult, FileWriteOut, error) {
	data, err := decodeContent(in.Content, in.Encoding)
	if err != nil {
		return nil, FileWriteOut{}, err
	}
	sb, ac, err := t.agentOf(ctx, in.SandboxID)
	if err != nil {
		return nil, FileWriteOut{}, err
	}
	p, err := resolve(sb, "path", in.Path)
	if err != nil {
		return nil, FileWriteOut{}, err
	}
	p, fi, err := follow(ctx, ac, p, true)
	if err != nil {
		return nil, FileWriteOut{}, err
	}
	noteChange(ctx, nil, p)
	created := fi.Name == ""
	if !created {
		if err := regular(p, fi); err != nil {
			return nil, FileWriteOut{}, err
		}
	}
	owner, err := mkdirAll(ctx, ac, path.Dir(p))
	if err != nil {
		return nil, FileWriteOut{}, err
	}
	if !created {
		owner = fi
	}
	n, err := ac.WriteFile(ctx, p, bytes.NewReader(data), 0)
	if err != nil {
		return nil, FileWriteOut{}, err
	}
	if err := own(ctx, ac, p, owner); err != nil {
		return nil, FileWriteOut{}, err
	}
	out := FileWriteOut{Path: p, Bytes: n, Created: created}
	verb := "replaced"
	if created {
		verb = "created"
	}
	return text(fmt.Sprintf("%s %s: %d bytes", verb, p, n)), out, nil
}

// decodeContent is file_write's content in its encoding, within MaxWrite.
func decodeContent(content, encoding string) ([]byte, error) {
	switch encoding {
	case "", "text":
		if len(content) > MaxWrite {
			return nil, fmt.Errorf("content: %d bytes, at most %d", len(content), MaxWrite)
		}
		return []byte(content), nil
	case "base64":
		s := strings.Map(func(r rune) rune {
			if r == ' ' || r == '\n' || r == '\r' || r == '\t' {
				return -1
			}
			return r
		}, content)
		if n := base64.RawStdEncoding.DecodedLen(len(strings.TrimRight(s, "="))); n > MaxWrite {
			return nil, fmt.Errorf("content: %d bytes decoded, at most %d", n, MaxWrite)
		}
		enc := base64.StdEncoding
		if len(s)%4 != 0 {
			enc = base64.RawStdEncoding
		}
		data, err := enc.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("content: not base64 (%v)", err)
		}
		return data, nil
	}
	return nil, fmt.Errorf("encoding %.64q: want text (the default) or base64", encoding)
}

// mkdirAll makes dir and its missing parents, each owned as the closest
// directory that existed, and describes that directory.
func mkdirAll(ctx context.Context, ac *agent.Client, dir string) (agent.FileInfo, error) {
	var missing []string
	d := dir
	for {
		fi, err := ac.Stat(ctx, d)
		if err == nil {
			if fi.Mode&fs.ModeSymlink != 0 {
				// The kernel follows it; describe what it reaches.
				if _, fi, err = follow(ctx, ac, d, false); err != nil {
					return fi, err
				}
			}
			if !fi.IsDir {
				return fi, fmt.Errorf("%s is not a directory", d)
			}
			if len(missing) > 0 {
				if err := ac.Mkdir(ctx, dir, true); err != nil {
					return fi, err
				}
				for _, m := range missing {
					if err := own(ctx, ac, m, fi); err != nil {
						return fi, err
					}
				}
			}
			return fi, nil
		}
		if !errors.Is(err, fs.ErrNotExist) || d == "/" {
			return fi, err
		}
		missing = append(missing, d)
		d = path.Dir(d)
	}
}

// own gives the file at p the owner and group of like, when the agent
// may (it may not in a sandbox without the capability: the file is then
// the agent's, as commands see it).
func own(ctx context.Context, ac *agent.Client, p string, like agent.FileInfo) error {
	fi, err := ac.Stat(ctx, p)
	if err != nil {
		return err
	}
	if fi.UID == like.UID && fi.GID == like.GID {
		return nil
	}
	if err := ac.Chown(ctx, p, like.UID, like.GID); err != nil && !errors.Is(err, fs.ErrPermission) {
		return err
	}
	return nil
}

func (t *tools) fileEdit(ctx context.Context, _ *sdk.CallToolRequest, in FileEditIn) (*sdk.CallToolResult, FileEditOut, error) {
	switch {
	case in.OldString == "":
		return nil, FileEditOut{}, errors.New("old_string is required (to write a whole file, use file_write)")
	case in.OldString == in.NewString:
		return nil, FileEditOut{}, errors.New("old_string and new_string are the same: nothing to change")
	case len(in.NewString) > MaxEdit:
		return nil, FileEditOut{}, fmt.Errorf("new_string: %d bytes, at most %d", len(in.NewString), MaxEdit)
	}
	sb, ac, err := t.agentOf(ctx, in.SandboxID)
	if err != nil {
		return nil, FileEditOut{}, err
	}
	p, err := resolve(sb, "path", in.Path)
	if err != nil {
		return nil, FileEditOut{}, err
	}
	p, fi, err := follow(ctx, ac, p, false)
	if err != nil {
		return nil, FileEditOut{}, err
	}
	noteChange(ctx, nil, p)
	if err := regular(p, fi); err != nil {
		return nil, FileEditOut{}, err
	}
	if fi.Size > MaxEdit {
		return nil, FileEditOut{}, fmt.Errorf("%s: %d bytes, larger than file_edit edits (%d): use exec (sed, a script)", p, fi.Size, MaxEdit)
	}
	data, err := readUpTo(ctx, ac, p, MaxEdit+1)
	if err != nil {
		return nil, FileEditOut{}, err
	}
	if len(data) > MaxEdit {
		return nil, FileEditOut{}, fmt.Errorf("%s: larger than file_edit edits (%d bytes): use exec (sed, a script)", p, MaxEdit)
	}
	old := []byte(in.OldString)
	count := bytes.Count(data, old)
	switch {
	case count == 0:
		return nil, FileEditOut{}, fmt.Errorf("old_string not found in %s: it must match exactly, whitespace and indentation included (file_read shows the file); nothing changed", p)
	case count > 1 && !in.ReplaceAll:
		return nil, FileEditOut{}, fmt.Errorf("old_string occurs %d times in %s: give more of the surrounding text to make it unique, or set replace_all; nothing changed", count, p)
	}
	edited := bytes.ReplaceAll(data, old, []byte(in.NewString))
	if len(edited) > MaxWrite {
		return nil, FileEditOut{}, fmt.Errorf("%s would be %d bytes, more than %d; nothing changed", p, len(edited), MaxWrite)
	}
	// Mode 0 keeps the file's mode.
	n, err := ac.WriteFile(ctx, p, bytes.NewReader(edited), 0)
	if err != nil {
		return nil, FileEditOut{}, err
	}
	if err := own(ctx, ac, p, fi); err != nil {
		return nil, FileEditOut{}, err
	}
	out := FileEditOut{Path: p, Replacements: count, Bytes: n}
	return text(fmt.Sprintf("edited %s: %d replacement(s), %d bytes now", p, count, n)), out, nil
}

func (t *tools) fileList(ctx context.Context, _ *sdk.CallToolRequest, in FileListIn) (*sdk.CallToolResult, FileListOut, error) {
	depth := in.Depth
	switch {
	case depth == 0:
		depth = 1
	case depth < 0 || depth > MaxListDepth:
		return nil, FileListOut{}, fmt.Errorf("depth %d: want 1 to %d", depth, MaxListDepth)
	}
	sb, ac, err := t.agentOf(ctx, in.SandboxID)
	if err != nil {
		return nil, FileListOut{}, err
	}
	if in.Path == "" {
		in.Path = "."
	}
	root, err := resolve(sb, "path", in.Path)
	if err != nil {
		return nil, FileListOut{}, err
	}
	root, fi, err := follow(ctx, ac, root, false)
	if err != nil {
		return nil, FileListOut{}, err
	}
	out := FileListOut{Path: root, Entries: []FileEntry{}}
	if !fi.IsDir {
		out.Path = path.Dir(root)
		out.Entries = append(out.Entries, entryOf(path.Base(root), fi))
		return text(listText(out)), out, nil
	}
	// Breadth first, so that a cut keeps the shallow entries.
	level := []string{""}
	for d := 1; d <= depth && len(level) > 0 && !out.Truncated; d++ {
		var next []string
		for _, rel := range level {
			list, err := ac.List(ctx, path.Join(root, rel))
			if err != nil {
				if rel == "" {
					return nil, FileListOut{}, err
				}
				for i := range out.Entries {
					if out.Entries[i].Path == rel {
						out.Entries[i].Error = err.Error()
					}
				}
				continue
			}
			for _, e := range list {
				if len(out.Entries) >= MaxListEntries {
					out.Truncated = true
					break
				}
				p := path.Join(rel, e.Name)
				out.Entries = append(out.Entries, entryOf(p, e))
				if e.IsDir {
					next = append(next, p)
				}
			}
			if out.Truncated {
				break
			}
		}
		level = next
	}
	sortEntries(out.Entries)
	return text(listText(out)), out, nil
}

func entryOf(p string, fi agent.FileInfo) FileEntry {
	e := FileEntry{Path: p, Type: "other", Size: fi.Size, Mode: unixMode(fi.Mode), MTime: fi.ModTime.UTC()}
	switch {
	case fi.IsDir:
		e.Type = "dir"
	case fi.Mode.IsRegular():
		e.Type = "file"
	case fi.Mode&fs.ModeSymlink != 0:
		e.Type, e.Target = "symlink", fi.Link
	}
	return e
}

// unixMode is a mode's permission bits, with setuid, setgid and sticky,
// as chmod takes them in octal.
func unixMode(m fs.FileMode) string {
	v := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		v |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		v |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		v |= 0o1000
	}
	return fmt.Sprintf("%04o", v)
}

func sortEntries(es []FileEntry) {
	// Sorted by path element by element, so that a directory's entries
	// follow it.
	less := func(a, b string) int {
		return strings.Compare(strings.ReplaceAll(a, "/", "\x00"), strings.ReplaceAll(b, "/", "\x00"))
	}
	slices.SortFunc(es, func(a, b FileEntry) int { return less(a.Path, b.Path) })
}

// listText is file_list's result as lines: type, size, mode, time, path.
func listText(out FileListOut) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:\n", out.Path)
	for _, e := range out.Entries {
		name := e.Path
		switch e.Type {
		case "dir":
			name += "/"
		case "symlink":
			name += " -> " + e.Target
		}
		fmt.Fprintf(&b, "%-7s %s %10d %s %s", e.Type, e.Mode, e.Size, e.MTime.Format(time.DateTime), name)
		if e.Error != "" {
			b.WriteString("  [cannot list: " + e.Error + "]")
		}
		b.WriteByte('\n')
	}
	if len(out.Entries) == 0 {
		b.WriteString("(empty)\n")
	}
	if out.Truncated {
		fmt.Fprintf(&b, "[cut at %d entries: list a subdirectory, or a smaller depth]\n", MaxListEntries)
	}
	return b.String()
}
