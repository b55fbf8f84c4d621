package main

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hutch-sandbox/hutch/internal/image/fetch"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// drawEvery is how often the progress line is drawn at most.
const drawEvery = 100 * time.Millisecond

// rateWindow is how far back the rate shown looks.
const rateWindow = 3 * time.Second

// meter shows on a terminal how bringing an image in goes: one line,
// redrawn in place (a carriage return, then spaces over what the last
// drawing left) at most ten times a second, with the layers done, the
// bytes fetched (of those to fetch, when the registry's manifest says)
// and the rate; and a line that stays when an image is in.
type meter struct {
	term *os.File
	verb string // "pulling", "importing"
	name string // what is brought in, as the user named it

	fetched atomic.Int64 // bytes, of every image so far

	mu         sync.Mutex
	image      string // the digest of the image under way, "" before one starts
	layers     int
	done       int
	cached     int
	total      int64 // bytes to fetch of this image, 0 when unknown
	base       int64 // fetched when this image started
	start      time.Time
	samples    []sample
	width      int // of the line last drawn
	stop, quit chan struct{}
}

type sample struct {
	at    time.Time
	bytes int64
}

// newMeter starts drawing the progress of bringing name in on term.
func newMeter(term *os.File, verb, name string) *meter {
	m := &meter{term: term, verb: verb, name: name, start: time.Now(), stop: make(chan struct{}), quit: make(chan struct{})}
	go m.run()
	return m
}

// options sets o to report to m.
func (m *meter) options(o *fetch.Options) {
	o.Progress = m.event
	o.Fetched = func(n int64) { m.fetched.Add(n) }
}

func (m *meter) run() {
	defer close(m.quit)
	t := time.NewTicker(drawEvery)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.mu.Lock()
			m.draw()
			m.mu.Unlock()
		}
	}
}

// event takes a step of fetch's.
func (m *meter) event(e fetch.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case e.Index == 0:
		if m.image != "" {
			m.finishImage(true)
		}
		m.image, m.layers, m.done, m.cached, m.total = e.Image, e.Count, 0, 0, e.Size
		m.base, m.start, m.samples = m.fetched.Load(), time.Now(), nil
	case e.Done:
		m.done++
		if e.Cached {
			m.cached++
		}
	}
}

// println prints a line of its own (a warning) above the progress line.
func (m *meter) println(s string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.clear()
	fmt.Fprintln(m.term, s)
}

// finish stops drawing and leaves the line of the image brought in,
// ending with its digest if withDigest (else stdout, the same terminal,
// shows it next); after a failure (ok false) it only clears the line.
func (m *meter) finish(ok, withDigest bool) {
	close(m.stop)
	<-m.quit
	m.mu.Lock()
	defer m.mu.Unlock()
	if ok && m.image != "" {
		m.finishImage(withDigest)
	} else {
		m.clear()
	}
}

// finishImage replaces the progress line with the summary of the image
// under way.
func (m *meter) finishImage(withDigest bool) {
	m.clear()
	n := m.fetched.Load() - m.base
	took := time.Since(m.start)
	s := fmt.Sprintf("%s %s: %s", strings.Replace(m.verb, "ing", "ed", 1), m.name, plural(m.layers, "layer"))
	if m.cached > 0 {
		s += fmt.Sprintf(" (%d in the store)", m.cached)
	}
	s += fmt.Sprintf(", %s in %.1f s", humanSize(n), took.Seconds())
	if sec := took.Seconds(); sec > 0 && n > 0 {
		s += fmt.Sprintf(" (%s/s)", humanSize(int64(float64(n)/sec)))
	}
	if withDigest {
		s += ": " + m.image
	}
	fmt.Fprintln(m.term, s)
	m.image = ""
}

// draw redraws the progress line.
func (m *meter) draw() {
	line := m.line(time.Now())
	// A line longer than the terminal would wrap, and the carriage
	// return would go back to its last row only.
	cols := 80
	if _, c, err := sandbox.TerminalSize(m.term); err == nil && c > 1 {
		cols = int(c)
	}
	if r := []rune(line); len(r) > cols-1 {
		line = string(r[:cols-1])
	}
	w := len([]rune(line))
	fmt.Fprintf(m.term, "\r%s%s", line, strings.Repeat(" ", max(0, m.width-w)))
	m.width = w
}

// line is the progress line at now: before an image's manifest is read,
// what is brought in; then its layers done, its bytes and the rate.
func (m *meter) line(now time.Time) string {
	if m.image == "" {
		return fmt.Sprintf("%s %s ...", m.verb, m.name)
	}
	n := m.fetched.Load() - m.base
	m.samples = append(m.samples, sample{now, n})
	for len(m.samples) > 1 && now.Sub(m.samples[0].at) > rateWindow {
		m.samples = m.samples[1:]
	}
	line := fmt.Sprintf("%s %s: %d/%d layers, ", m.verb, m.name, m.done, m.layers)
	if m.total > 0 {
		line += fmt.Sprintf("%s/%s", humanSize(n), humanSize(m.total))
	} else {
		line += humanSize(n) + " read"
	}
	if first := m.samples[0]; now.Sub(first.at) > drawEvery {
		line += fmt.Sprintf(", %s/s", humanSize(int64(float64(n-first.bytes)/now.Sub(first.at).Seconds())))
	}
	return line
}

// clear blanks the progress line and puts the cursor at its start.
func (m *meter) clear() {
	if m.width > 0 {
		fmt.Fprintf(m.term, "\r%s\r", strings.Repeat(" ", m.width))
		m.width = 0
	}
}

// plural is "1 layer", "2 layers".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
