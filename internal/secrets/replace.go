package secrets

import (
	"bytes"
	"cmp"
	"io"
	"slices"
)

// readBufSize is how much a Replacer's reader reads from its source at a
// time.
const readBufSize = 32 << 10

// Replacer replaces several byte patterns at once, each old by its new, in
// one left-to-right pass: at each position the longest pattern that occurs
// there is replaced (the first of equal ones), and the pass goes on after
// it, so replacements never overlap and their output is never searched
// again. Empty patterns are ignored.
//
// A Replacer is immutable and safe for concurrent use; the readers it
// makes are not.
//
// Searching costs, at each position whose byte starts a pattern, one
// comparison per pattern starting with that byte: meant for a few dozen
// patterns, such as a sandbox's secrets and their placeholders. Positions
// that start no pattern are skipped quickly, with bytes.IndexByte when all
// patterns share their first byte (placeholders with one prefix).
type Replacer struct {
	old, new [][]byte
	// byFirst lists, for each byte, the indexes of the non-empty patterns
	// starting with it, longest first, then in the order given.
	byFirst [256][]int
	// only is the first byte of every pattern when they all share it, else
	// -1.
	only int
	// maxLen is the length of the longest pattern, 0 when there is none.
	maxLen int
}

// NewReplacer returns a Replacer of each pair's old (pair[0]) by its new
// (pair[1]). It copies the pairs.
func NewReplacer(pairs ...[2][]byte) *Replacer {
	r := &Replacer{
		old:  make([][]byte, len(pairs)),
		new:  make([][]byte, len(pairs)),
		only: -1,
	}
	firsts := 0
	for k, p := range pairs {
		r.old[k] = bytes.Clone(p[0])
		r.new[k] = bytes.Clone(p[1])
		if len(p[0]) == 0 {
			continue
		}
		c := p[0][0]
		if len(r.byFirst[c]) == 0 {
			firsts++
			r.only = int(c)
		}
		r.byFirst[c] = append(r.byFirst[c], k)
		r.maxLen = max(r.maxLen, len(p[0]))
	}
	if firsts != 1 {
		r.only = -1
	}
	for c := range r.byFirst {
		slices.SortStableFunc(r.byFirst[c], func(a, b int) int {
			return cmp.Compare(len(r.old[b]), len(r.old[a]))
		})
	}
	return r
}

// Bytes returns b with every pattern replaced. If no pattern occurs in b it
// returns b itself; else a new slice.
func (r *Replacer) Bytes(b []byte) []byte {
	pos, k := r.find(b, 0, len(b))
	if pos < 0 {
		return b
	}
	out := make([]byte, 0, len(b)+max(0, len(r.new[k])-len(r.old[k])))
	last := 0
	for pos >= 0 {
		out = append(out, b[last:pos]...)
		out = append(out, r.new[k]...)
		last = pos + len(r.old[k])
		pos, k = r.find(b, last, len(b))
	}
	return append(out, b[last:]...)
}

// Contains reports which patterns occur in b, as indexes into the pairs
// given to NewReplacer, in increasing order; nil if none does. It reports
// every pattern found anywhere in b, also one that Bytes would not replace
// because a longer or earlier match covers it.
func (r *Replacer) Contains(b []byte) []int {
	var found []int
	for k, o := range r.old {
		if len(o) > 0 && bytes.Contains(b, o) {
			found = append(found, k)
		}
	}
	return found
}

// First returns the index, into the pairs given to NewReplacer, of the
// pattern Bytes would replace first in b (the longest at the first
// position where one occurs), or -1 if none occurs: one pass over b, as
// Bytes makes.
func (r *Replacer) First(b []byte) int {
	_, k := r.find(b, 0, len(b))
	return k
}

// find returns the first position in b from from to before limit where a
// pattern occurs, and the index of the longest pattern there, or -1, -1.
// A pattern occurs at a position only if it fits in b.
func (r *Replacer) find(b []byte, from, limit int) (int, int) {
	if r.maxLen == 0 {
		return -1, -1
	}
	for i := from; i < limit; i++ {
		if r.only >= 0 {
			j := bytes.IndexByte(b[i:limit], byte(r.only))
			if j < 0 {
				return -1, -1
			}
			i += j
		}
		for _, k := range r.byFirst[b[i]] {
			if bytes.HasPrefix(b[i:], r.old[k]) {
				return i, k
			}
		}
	}
	return -1, -1
}

// undecided returns the first position in b from from where what follows
// might yet become a longer match than b holds (b ends before the end of
// some pattern it agrees with so far), or len(b) if there is none. Only
// the last maxLen-1 positions can be such.
func (r *Replacer) undecided(b []byte, from int) int {
	for p := max(from, len(b)-r.maxLen+1); p < len(b); p++ {
		for _, k := range r.byFirst[b[p]] {
			o := r.old[k]
			if len(o) <= len(b)-p {
				break // the rest are no longer
			}
			if bytes.HasPrefix(o, b[p:]) {
				return p
			}
		}
	}
	return len(b)
}

// MaxLen is the length of the longest pattern, 0 when there is none.
func (r *Replacer) MaxLen() int {
	return r.maxLen
}

// Undecided returns the first position in b from which b is a proper
// prefix of some pattern (what follows b may complete the pattern), or
// len(b) if there is none. A stream watched with Contains holds back
// b[Undecided(b):] until it has seen what follows.
func (r *Replacer) Undecided(b []byte) int {
	return r.undecided(b, 0)
}

// Reader returns a reader of src with every pattern replaced, as Bytes
// would replace them in all of src, also where a pattern spans two reads
// from src. It streams: it reads src 32 KiB at a time and holds back at
// most the longest pattern's length less one byte, and only the bytes
// that might start a pattern, so a stream that pauses (server-sent events,
// say) is passed on up to where it paused unless it paused inside what may
// be a pattern.
//
// The reader returns src's error after the data before it. If that error
// is not io.EOF, the held-back bytes are dropped: they might be the start
// of a pattern, a real secret's first bytes when Reader swaps real values
// out. With no patterns, Reader returns src itself.
func (r *Replacer) Reader(src io.Reader) io.Reader {
	if r.maxLen == 0 {
		return src
	}
	return &replaceReader{r: r, src: src, buf: make([]byte, readBufSize+r.maxLen)}
}

// replaceReader is the reader Replacer.Reader returns.
type replaceReader struct {
	r   *Replacer
	src io.Reader
	// buf[lo:hi] is read from src and not yet processed.
	buf    []byte
	lo, hi int
	// out is output not yet returned (part of buf or a replacement), and
	// repl a replacement to return after it.
	out, repl []byte
	// err is src's error, once it returned one.
	err error
}

// maxEmptyReads is how many reads from src in a row may return nothing
// before the reader gives up with io.ErrNoProgress.
const maxEmptyReads = 100

// Read implements io.Reader.
func (z *replaceReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	empty := 0
	for {
		if len(z.out) > 0 {
			n := copy(p, z.out)
			z.out = z.out[n:]
			return n, nil
		}
		if z.repl != nil {
			z.out, z.repl = z.repl, nil
			continue
		}
		limit := z.hi
		if z.err != io.EOF {
			limit = z.r.undecided(z.buf[:z.hi], z.lo)
		}
		if z.lo < limit {
			pos, k := z.r.find(z.buf[:z.hi], z.lo, limit)
			if pos < 0 {
				pos = limit
			}
			z.out = z.buf[z.lo:pos]
			z.lo = pos
			if pos < limit {
				z.repl = z.r.new[k]
				z.lo += len(z.r.old[k])
			}
			continue
		}
		if z.err != nil {
			return 0, z.err
		}
		// Keep the undecided rest, shorter than the longest pattern, at
		// the start of buf and read more after it.
		z.hi = copy(z.buf, z.buf[z.lo:z.hi])
		z.lo = 0
		n, err := z.src.Read(z.buf[z.hi:])
		z.hi += n
		if err != nil {
			z.err = err
		} else if n == 0 {
			if empty++; empty >= maxEmptyReads {
				return 0, io.ErrNoProgress
			}
		}
	}
}
