package mcp

import (
	"fmt"
	"unicode/utf8"
)

// cutter keeps the head and the tail of a stream of bytes, max bytes in
// all, and counts what fell between them: a command's output as a result
// carries it. It keeps at most 2×max bytes in memory however much it is
// written.
type cutter struct {
	max  int
	head []byte
	tail []byte // the last bytes after the head, at most max-max/2
	cut  int64  // bytes dropped between head and tail
	n    int64  // bytes written
}

func newCutter(max int) *cutter { return &cutter{max: max} }

// Write keeps what fits of b in the head and the last of it in the tail.
func (c *cutter) Write(b []byte) (int, error) {
	n := len(b)
	c.n += int64(n)
	hmax := c.max / 2
	if k := min(hmax-len(c.head), len(b)); k > 0 {
		c.head = append(c.head, b[:k]...)
		b = b[k:]
	}
	if len(b) == 0 {
		return n, nil
	}
	tmax := c.max - hmax
	if len(b) >= tmax {
		c.cut += int64(len(c.tail) + len(b) - tmax)
		c.tail = append(c.tail[:0], b[len(b)-tmax:]...)
		return n, nil
	}
	// Appending past the slice's capacity copies the kept bytes (at most
	// 2×tmax) to a new array: the memory stays bounded.
	c.tail = append(c.tail, b...)
	if over := len(c.tail) - tmax; over > 0 {
		c.cut += int64(over)
		c.tail = c.tail[over:]
	}
	return n, nil
}

// Len is the number of bytes written since the last take.
func (c *cutter) Len() int64 { return c.n }

// take returns what was kept (the head, and the tail after a cut of cut
// bytes) and empties the cutter. Unless final, an incomplete UTF-8
// character at the end is kept back for the next take, so that a
// character split between two writes comes out whole. Where a cut falls
// inside a character, the character's bytes are counted in the cut.
func (c *cutter) take(final bool) (head, tail []byte, cut int64) {
	head, tail, cut = c.head, c.tail, c.cut
	var carry []byte
	if !final {
		last := head
		if len(tail) > 0 {
			last = tail
		}
		if k := incompleteSuffix(last); k > 0 && (len(tail) > 0 || cut == 0) {
			carry = append([]byte(nil), last[len(last)-k:]...)
			if len(tail) > 0 {
				tail = tail[:len(tail)-k]
			} else {
				head = head[:len(head)-k]
			}
		}
	}
	if cut > 0 {
		k := incompleteSuffix(head)
		head = head[:len(head)-k]
		j := 0
		for j < len(tail) && j < utf8.UTFMax && !utf8.RuneStart(tail[j]) {
			j++
		}
		tail = tail[j:]
		cut += int64(k + j)
	}
	*c = cutter{max: c.max}
	if len(carry) > 0 {
		_, _ = c.Write(carry)
	}
	return head, tail, cut
}

// incompleteSuffix is the length of an incomplete UTF-8 character at the
// end of b (0 when b ends with a whole one, or with bytes that are no
// UTF-8 at all).
func incompleteSuffix(b []byte) int {
	for k := 1; k <= utf8.UTFMax-1 && k <= len(b); k++ {
		c := b[len(b)-k]
		if !utf8.RuneStart(c) {
			continue
		}
		// c starts a character: incomplete if it needs more than k bytes.
		if c >= 0xC0 && !utf8.FullRune(b[len(b)-k:]) {
			return k
		}
		return 0
	}
	return 0
}

// joinCut renders what a cutter kept: head and tail around a line that
// says how many bytes were cut, and where the whole is (url, if any).
func joinCut(head, tail []byte, cut int64, url string) string {
	if cut == 0 {
		return string(head) + string(tail)
	}
	where := "no link to the whole: this server publishes none"
	if url != "" {
		where = "the whole output: " + url
	}
	return fmt.Sprintf("%s\n[… %d bytes cut here; %s …]\n%s", head, cut, where, tail)
}
