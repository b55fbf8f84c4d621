package secrets

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// pairs makes replacement pairs from old, new, old, new... strings.
func pairs(s ...string) [][2][]byte {
	var p [][2][]byte
	for i := 0; i+1 < len(s); i += 2 {
		p = append(p, [2][]byte{[]byte(s[i]), []byte(s[i+1])})
	}
	return p
}

// naiveReplace is the reference: at each position, the longest pattern
// there (the first of equal ones), else the byte itself.
func naiveReplace(ps [][2][]byte, in []byte) []byte {
	var out []byte
	for i := 0; i < len(in); {
		best := -1
		for k, p := range ps {
			if len(p[0]) > 0 && bytes.HasPrefix(in[i:], p[0]) && (best < 0 || len(p[0]) > len(ps[best][0])) {
				best = k
			}
		}
		if best < 0 {
			out = append(out, in[i])
			i++
			continue
		}
		out = append(out, ps[best][1]...)
		i += len(ps[best][0])
	}
	return out
}

var replaceTests = []struct {
	name  string
	pairs [][2][]byte
	in    string
	want  string
}{
	{"no pairs", nil, "hello", "hello"},
	{"empty input", pairs("a", "b"), "", ""},
	{"no match", pairs("xyz", "1"), "hello world", "hello world"},
	{"one", pairs("world", "there"), "hello world!", "hello there!"},
	{"several occurrences", pairs("a", "A"), "banana", "bAnAnA"},
	{"several patterns", pairs("ph_one", "real1", "ph_two", "real2"), "x ph_two y ph_one z ph_two", "x real2 y real1 z real2"},
	{"longest wins", pairs("ab", "1", "abc", "2", "a", "3"), "abcd ab a", "2d 1 3"},
	{"longest wins whatever the order", pairs("abc", "2", "ab", "1"), "ab abc", "1 2"},
	{"leftmost before longer", pairs("bcdef", "X", "ab", "Y"), "abcdef", "Ycdef"},
	{"equal patterns: the first", pairs("ab", "1", "ab", "2"), "ab", "1"},
	{"no rescan of output", pairs("a", "aa", "aa", "b"), "a", "aa"},
	{"overlapping self", pairs("aa", "b"), "aaaaa", "bba"},
	{"adjacent", pairs("ab", "X"), "ababab", "XXX"},
	{"whole input", pairs("secret", "ph"), "secret", "ph"},
	{"at the end", pairs("end", "E"), "the end", "the E"},
	{"partial at the end", pairs("ending", "E"), "the endin", "the endin"},
	{"grows", pairs("k", "0123456789"), "kk", "01234567890123456789"},
	{"shrinks", pairs("0123456789", "k"), "x0123456789y", "xky"},
	{"to nothing", pairs("noise", ""), "a noise b noise", "a  b "},
	{"empty pattern ignored", pairs("", "X", "b", "B"), "abc", "aBc"},
	{"only empty patterns", pairs("", "X"), "abc", "abc"},
	{"binary", [][2][]byte{{{0, 0xff}, {1}}, {{0xff}, {2, 2}}}, "\x00\xff\xff\x00", "\x01\x02\x02\x00"},
	{"same first byte", pairs("ph_a", "1", "ph_b", "2", "ph_", "3"), "ph_a ph_b ph_c ph", "1 2 3c ph"},
	{"different first bytes", pairs("ph_a", "1", "sk_b", "2"), "sk_b ph_a sk_ph_a", "2 1 sk_1"},
	{"a pattern inside another", pairs("abcde", "1", "bcd", "2"), "abcdf abcde", "a2f 1"},
}

func TestReplacerBytes(t *testing.T) {
	for _, tt := range replaceTests {
		r := NewReplacer(tt.pairs...)
		in := []byte(tt.in)
		got := r.Bytes(in)
		if string(got) != tt.want {
			t.Errorf("%s: Bytes(%q) = %q, want %q", tt.name, tt.in, got, tt.want)
		}
		if ref := naiveReplace(tt.pairs, in); string(ref) != tt.want {
			t.Errorf("%s: the reference gives %q, want %q", tt.name, ref, tt.want)
		}
		if string(in) != tt.in {
			t.Errorf("%s: Bytes modified its input", tt.name)
		}
		if tt.in == tt.want && len(in) > 0 && &got[0] != &in[0] {
			t.Errorf("%s: Bytes copied an input without matches", tt.name)
		}
	}
}

func TestNewReplacerCopies(t *testing.T) {
	old, nw := []byte("abc"), []byte("xyz")
	r := NewReplacer([2][]byte{old, nw})
	old[0], nw[0] = 'Q', 'Q'
	if got := r.Bytes([]byte("abc")); string(got) != "xyz" {
		t.Errorf("after changing the caller's slices: %q", got)
	}
}

// readAllVia reads r.Reader(src) to the end.
func readAllVia(r *Replacer, src io.Reader) (string, error) {
	b, err := io.ReadAll(r.Reader(src))
	return string(b), err
}

// chunkReader returns data in chunks of random sizes, sometimes nothing,
// and sometimes the last data together with io.EOF.
type chunkReader struct {
	data []byte
	rnd  *rand.Rand
	max  int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	if c.rnd.IntN(10) == 0 {
		return 0, nil
	}
	n := min(len(p), len(c.data), 1+c.rnd.IntN(c.max))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	if len(c.data) == 0 && c.rnd.IntN(2) == 0 {
		return n, io.EOF
	}
	return n, nil
}

func TestReplacerReader(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	readers := map[string]func(string) io.Reader{
		"whole":    func(s string) io.Reader { return strings.NewReader(s) },
		"one byte": func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) },
		"half":     func(s string) io.Reader { return iotest.HalfReader(strings.NewReader(s)) },
		"data+EOF": func(s string) io.Reader { return iotest.DataErrReader(strings.NewReader(s)) },
		"chunks":   func(s string) io.Reader { return &chunkReader{[]byte(s), rnd, 4} },
	}
	for _, tt := range replaceTests {
		r := NewReplacer(tt.pairs...)
		for name, mk := range readers {
			got, err := readAllVia(r, mk(tt.in))
			if err != nil || got != tt.want {
				t.Errorf("%s, %s reader: %q, %v; want %q", tt.name, name, got, err, tt.want)
			}
		}
		if err := iotest.TestReader(r.Reader(strings.NewReader(tt.in)), []byte(tt.want)); err != nil {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}

func TestReplacerReaderNoPatterns(t *testing.T) {
	src := strings.NewReader("x")
	if NewReplacer().Reader(src) != io.Reader(src) || NewReplacer(pairs("", "a")...).Reader(src) != io.Reader(src) {
		t.Error("Reader without patterns does not return src")
	}
}

// TestReplacerReaderBoundaries puts a placeholder across every possible
// boundary between two reads.
func TestReplacerReaderBoundaries(t *testing.T) {
	ph, real := "hutch_ph_Q3xYzzkQ9aPm2wQeR7tUvB", "ghp_realRealRealRealReal"
	r := NewReplacer(pairs(ph, real, "hutch_ph_other", "X")...)
	in := "Authorization: token " + ph + "\r\n" + ph + ph + "hutch_ph_oth" + "\r\n"
	want := "Authorization: token " + real + "\r\n" + real + real + "hutch_ph_oth" + "\r\n"
	for cut := range len(in) + 1 {
		for _, cut2 := range []int{cut, min(cut+1, len(in)), min(cut+len(ph)-1, len(in)), len(in)} {
			src := io.MultiReader(strings.NewReader(in[:cut]), strings.NewReader(in[cut:cut2]), strings.NewReader(in[cut2:]))
			if got, err := readAllVia(r, src); err != nil || got != want {
				t.Fatalf("cut at %d and %d: %q, %v", cut, cut2, got, err)
			}
		}
	}
}

// TestReplacerReaderProperty compares Reader, under random chunkings, with
// Bytes and with the reference, on random patterns and inputs over small
// alphabets, where patterns overlap, nest and repeat often.
func TestReplacerReaderProperty(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 7))
	word := func(alphabet string, minLen, maxLen int) []byte {
		b := make([]byte, minLen+rnd.IntN(maxLen-minLen+1))
		for i := range b {
			b[i] = alphabet[rnd.IntN(len(alphabet))]
		}
		return b
	}
	for iter := range 5000 {
		alphabet := []string{"ab", "abc", "abcd", "a\x00\xff"}[rnd.IntN(4)]
		ps := make([][2][]byte, 1+rnd.IntN(6))
		for k := range ps {
			ps[k] = [2][]byte{word(alphabet, 0, 7), word("xyzXYZ", 0, 9)}
		}
		in := word(alphabet, 0, 400)
		r := NewReplacer(ps...)
		want := naiveReplace(ps, in)
		if got := r.Bytes(in); !bytes.Equal(got, want) {
			t.Fatalf("iteration %d: patterns %q, input %q: Bytes %q, want %q", iter, ps, in, got, want)
		}
		for _, src := range []io.Reader{
			&chunkReader{in, rnd, 1 + rnd.IntN(20)},
			iotest.OneByteReader(bytes.NewReader(in)),
		} {
			got, err := io.ReadAll(r.Reader(src))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("iteration %d: patterns %q, input %q: Reader %q, %v; want %q", iter, ps, in, got, err, want)
			}
		}
		// Reads into small buffers, too.
		var out []byte
		rd := r.Reader(&chunkReader{in, rnd, 50})
		buf := make([]byte, 1+rnd.IntN(5))
		for {
			n, err := rd.Read(buf)
			out = append(out, buf[:n]...)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(out, want) {
			t.Fatalf("iteration %d: small reads give %q, want %q", iter, out, want)
		}
	}
}

// TestReplacerReaderPassesPauses checks that a stream that pauses is
// passed on up to where it paused, but for what might start a pattern.
func TestReplacerReaderPassesPauses(t *testing.T) {
	ph := "ph_0123456789abcdefghijkl"
	r := NewReplacer(pairs(ph, "REAL")...)
	pr, pw := io.Pipe()
	rd := r.Reader(pr)
	steps := []struct{ write, want string }{
		{"data: {\"token\": 1}\n\n", "data: {\"token\": 1}\n\n"},
		{"data: ph_0123", "data: "},              // might be the placeholder: held back
		{"456789abcdefghijkl!\n\n", "REAL!\n\n"}, // it was
		{"data: ph_01x\n\n", "data: ph_01x\n\n"}, // it was not
		{"p", ""},
		{"h_", ""},
		{"z", "ph_z"},
	}
	// One writer, in order; each write returns once the reader took it.
	writes := make(chan string, len(steps))
	go func() {
		for w := range writes {
			_, _ = pw.Write([]byte(w))
		}
		pw.Close()
	}()
	buf := make([]byte, 1024)
	for i, s := range steps {
		writes <- s.write
		done := make(chan struct{})
		var got []byte
		var err error
		go func() {
			defer close(done)
			for len(got) < len(s.want) && err == nil {
				var n int
				n, err = rd.Read(buf)
				got = append(got, buf[:n]...)
			}
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("step %d: no %q after 5 s: the reader waits for more", i, s.want)
		}
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if string(got) != s.want {
			t.Fatalf("step %d: read %q, want %q", i, got, s.want)
		}
	}
	close(writes)
	if rest, err := io.ReadAll(rd); err != nil || len(rest) != 0 {
		t.Errorf("at the end: %q, %v", rest, err)
	}
}

// errAfterReader returns data, then err.
type errAfterReader struct {
	data []byte
	err  error
}

func (e *errAfterReader) Read(p []byte) (int, error) {
	if len(e.data) == 0 {
		return 0, e.err
	}
	n := copy(p, e.data)
	e.data = e.data[n:]
	return n, nil
}

type zeroReader struct{ n int }

func (z *zeroReader) Read([]byte) (int, error) { z.n++; return 0, nil }

func TestReplacerReaderErrors(t *testing.T) {
	r := NewReplacer(pairs("REALSECRET", "ph")...)
	broken := errors.New("connection reset")
	tests := []struct {
		name string
		src  io.Reader
		want string
		err  error
	}{
		{"error after a pattern", &errAfterReader{[]byte("a REALSECRET b"), broken}, "a ph b", broken},
		// The held-back bytes might be the start of the real value: dropped.
		{"error inside a pattern", &errAfterReader{[]byte("a REALSEC"), broken}, "a ", broken},
		{"EOF inside a pattern", &errAfterReader{[]byte("a REALSEC"), io.EOF}, "a REALSEC", nil},
		{"unexpected EOF", &errAfterReader{[]byte("a REAL"), io.ErrUnexpectedEOF}, "a ", io.ErrUnexpectedEOF},
		{"immediate error", &errAfterReader{nil, broken}, "", broken},
		{"no progress", &zeroReader{}, "", io.ErrNoProgress},
		{"timeout", iotest.TimeoutReader(strings.NewReader("abc REALSECRET")), "abc ph", iotest.ErrTimeout},
	}
	for _, tt := range tests {
		got, err := io.ReadAll(r.Reader(tt.src))
		if string(got) != tt.want || !errors.Is(err, tt.err) {
			t.Errorf("%s: %q, %v; want %q, %v", tt.name, got, err, tt.want, tt.err)
		}
	}
	// The error sticks, and an empty read is no error.
	rd := r.Reader(&errAfterReader{[]byte("x"), broken})
	if n, err := rd.Read(nil); n != 0 || err != nil {
		t.Errorf("empty read: %d, %v", n, err)
	}
	_, _ = io.ReadAll(rd)
	if _, err := rd.Read(make([]byte, 10)); err != broken {
		t.Errorf("read after the error: %v", err)
	}
}

// patternStream yields a unit of text containing patterns over and over,
// n bytes in all, without holding more than the unit.
type patternStream struct {
	unit []byte
	off  int
	left int
}

func (s *patternStream) Read(p []byte) (int, error) {
	if s.left == 0 {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && s.left > 0 {
		c := copy(p[n:min(len(p), n+s.left)], s.unit[s.off:])
		n += c
		s.left -= c
		s.off = (s.off + c) % len(s.unit)
	}
	return n, nil
}

// checkWriter checks that what is written is want's unit over and over.
type checkWriter struct {
	unit []byte
	off  int
	n    int64
	bad  error
}

func (w *checkWriter) Write(p []byte) (int, error) {
	for i, c := range p {
		if w.bad == nil && c != w.unit[w.off] {
			w.bad = fmt.Errorf("byte %d is %q, want %q", w.n+int64(i), c, w.unit[w.off])
		}
		w.off = (w.off + 1) % len(w.unit)
	}
	w.n += int64(len(p))
	return len(p), nil
}

func TestReplacerReaderLarge(t *testing.T) {
	ph := "hutch_ph_" + strings.Repeat("Z", 31)
	real := strings.Repeat("r", 40)
	r := NewReplacer(pairs(ph, real, real, ph, "hutch_ph_nope", "?")...)
	// 997 bytes: reads of 32 KiB cut the unit, and its patterns, anywhere.
	unit := []byte(strings.Repeat("x", 400) + ph + strings.Repeat("y", 300) + "hutch_ph_nop" + ph + strings.Repeat("z", 205))
	if len(unit) != 997 {
		t.Fatalf("unit of %d bytes", len(unit))
	}
	want := r.Bytes(unit)
	const units = 64 << 20 / 997
	src := &patternStream{unit: unit, left: units * len(unit)}
	dst := &checkWriter{unit: want}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	n, err := io.Copy(dst, r.Reader(src))
	runtime.ReadMemStats(&after)
	if err != nil || dst.bad != nil {
		t.Fatal(err, dst.bad)
	}
	if n != int64(units*len(want)) {
		t.Errorf("copied %d bytes, want %d", n, units*len(want))
	}
	// 64 MiB went through; the reader's buffer is 32 KiB and io.Copy's too.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("allocated %d bytes streaming 64 MiB", alloc)
	}
}

func TestReplacerContains(t *testing.T) {
	r := NewReplacer(pairs("ph_a", "1", "ph_b", "2", "", "x", "ph_", "3", "abc", "4", "bcd", "5", "ph_a", "6")...)
	tests := []struct {
		in   string
		want []int
	}{
		{"", nil},
		{"nothing here", nil},
		{"ph_a", []int{0, 3, 6}},
		{"x ph_b y", []int{1, 3}},
		{"ph_c", []int{3}},
		{"ph", nil},
		{"abcd", []int{4, 5}}, // both occur, though Bytes replaces only abc
		{"bcd ph_b ph_a", []int{0, 1, 3, 5, 6}},
	}
	for _, tt := range tests {
		if got := r.Contains([]byte(tt.in)); !slices.Equal(got, tt.want) {
			t.Errorf("Contains(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
	if got := NewReplacer().Contains([]byte("abc")); got != nil {
		t.Errorf("no patterns: %v", got)
	}
}

// TestReplacerFirst: First names the pattern Bytes replaces first.
func TestReplacerFirst(t *testing.T) {
	r := NewReplacer(pairs("ph_a", "1", "ph_b", "2", "", "x", "ph_", "3", "abc", "4", "bcd", "5", "ph_a", "6")...)
	for _, tt := range []struct {
		in   string
		want int
	}{
		{"", -1},
		{"nothing here", -1},
		{"ph", -1},
		{"x ph_a", 0},    // the longest at the position, the first of equal ones
		{"ph_c ph_b", 3}, // the first position
		{"abcd", 4},
		{"zbcd ph_b", 5},
	} {
		if got := r.First([]byte(tt.in)); got != tt.want {
			t.Errorf("First(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
	if got := NewReplacer().First([]byte("abc")); got != -1 {
		t.Errorf("no patterns: %d", got)
	}
}

func BenchmarkReplacerReader(b *testing.B) {
	ph := "hutch_ph_" + strings.Repeat("Z", 31)
	r := NewReplacer(pairs(ph, strings.Repeat("r", 40), strings.Repeat("r", 40), ph)...)
	unit := []byte(strings.Repeat("x", 4000) + ph + strings.Repeat("y", 3000))
	b.SetBytes(int64(len(unit) * 100))
	for b.Loop() {
		src := &patternStream{unit: unit, left: len(unit) * 100}
		if _, err := io.Copy(io.Discard, r.Reader(src)); err != nil {
			b.Fatal(err)
		}
	}
}
