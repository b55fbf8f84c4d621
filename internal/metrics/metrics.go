// Package metrics keeps counters, gauges and histograms and writes them in
// the Prometheus text exposition format, version 0.0.4. It has no
// dependencies beyond the standard library.
//
// A metric is a family: a name, a help text, a type and the names of its
// labels; each combination of label values is one series. Counters and
// histograms are created standalone and may be added to any number of
// registries; gauges are computed when a registry is written (GaugeFunc).
// Everything is safe for concurrent use.
package metrics

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Collector is a metric family a Registry writes.
type Collector interface {
	// Name is the family's name.
	Name() string
	// write writes the family's HELP, TYPE and samples.
	write(w *bufio.Writer) error
}

// Registry is a set of collectors, written in the order of their names.
type Registry struct {
	mu   sync.Mutex
	list []Collector
}

// Register adds cs to r. It panics if a name is taken or invalid.
func (r *Registry) Register(cs ...Collector) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		if !validName(c.Name()) {
			panic(fmt.Sprintf("metrics: invalid name %q", c.Name()))
		}
		for _, o := range r.list {
			if o.Name() == c.Name() {
				panic(fmt.Sprintf("metrics: %s registered twice", c.Name()))
			}
		}
		r.list = append(r.list, c)
	}
}

// ContentType is the media type of what WriteTo writes.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// WriteTo writes every collector of r, by name.
func (r *Registry) WriteTo(w io.Writer) (int64, error) {
	r.mu.Lock()
	list := slices.Clone(r.list)
	r.mu.Unlock()
	slices.SortFunc(list, func(a, b Collector) int { return strings.Compare(a.Name(), b.Name()) })
	cw := &countWriter{w: w}
	bw := bufio.NewWriter(cw)
	for _, c := range list {
		if err := c.write(bw); err != nil {
			return cw.n, err
		}
	}
	err := bw.Flush()
	return cw.n, err
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

func validLabel(s string) bool {
	return validName(s) && !strings.Contains(s, ":") && !strings.HasPrefix(s, "__")
}

// family is what every kind of metric shares: its description and its
// series by label values.
type family[S any] struct {
	name, help string
	labels     []string
	newSeries  func() *S

	mu     sync.Mutex
	series map[string]*series[S]
}

type series[S any] struct {
	values []string
	s      *S
}

func newFamily[S any](name, help string, labels []string, mk func() *S) *family[S] {
	for _, l := range labels {
		if !validLabel(l) || l == "le" {
			panic(fmt.Sprintf("metrics: %s: invalid label name %q", name, l))
		}
	}
	f := &family[S]{name: name, help: help, labels: slices.Clone(labels), newSeries: mk, series: map[string]*series[S]{}}
	if len(labels) == 0 {
		f.with(nil) // a family without labels has its one series from the start
	}
	return f
}

func (f *family[S]) Name() string { return f.name }

// with returns the series of values, made on first use.
func (f *family[S]) with(values []string) *S {
	if len(values) != len(f.labels) {
		panic(fmt.Sprintf("metrics: %s: %d label values for %d labels", f.name, len(values), len(f.labels)))
	}
	key := strings.Join(values, "\xff")
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.series[key]
	if s == nil {
		s = &series[S]{values: slices.Clone(values), s: f.newSeries()}
		f.series[key] = s
	}
	return s.s
}

// sorted returns the series ordered by their label values.
func (f *family[S]) sorted() []*series[S] {
	f.mu.Lock()
	list := make([]*series[S], 0, len(f.series))
	for _, s := range f.series {
		list = append(list, s)
	}
	f.mu.Unlock()
	slices.SortFunc(list, func(a, b *series[S]) int { return slices.Compare(a.values, b.values) })
	return list
}

func writeHeader(w *bufio.Writer, name, help, typ string) {
	w.WriteString("# HELP " + name + " " + escapeHelp(help) + "\n")
	w.WriteString("# TYPE " + name + " " + typ + "\n")
}

// writeSample writes one line: name{labels} value.
func writeSample(w *bufio.Writer, name string, names, values []string, extraName, extraValue string, v float64) {
	w.WriteString(name)
	if len(names) > 0 || extraName != "" {
		w.WriteByte('{')
		sep := ""
		for i, n := range names {
			w.WriteString(sep + n + `="` + EscapeLabel(values[i]) + `"`)
			sep = ","
		}
		if extraName != "" {
			w.WriteString(sep + extraName + `="` + EscapeLabel(extraValue) + `"`)
		}
		w.WriteByte('}')
	}
	w.WriteByte(' ')
	w.WriteString(FormatValue(v))
	w.WriteByte('\n')
}

// EscapeLabel escapes a label value: backslash, double quote and line
// feed become \\, \" and \n.
func EscapeLabel(s string) string { return labelEscaper.Replace(s) }

// escapeHelp escapes a help text: backslash and line feed.
func escapeHelp(s string) string { return helpEscaper.Replace(s) }

// The replacers of EscapeLabel and escapeHelp, made once: a scrape
// escapes every label value it writes.
var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

// FormatValue formats a sample value as the format wants it.
func FormatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// atomicFloat is a float64 updated atomically.
type atomicFloat struct{ bits atomic.Uint64 }

func (a *atomicFloat) add(d float64) {
	for {
		old := a.bits.Load()
		if a.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+d)) {
			return
		}
	}
}

func (a *atomicFloat) load() float64 { return math.Float64frombits(a.bits.Load()) }

// Counter is a series that only goes up.
type Counter struct{ v atomicFloat }

// Inc adds 1.
func (c *Counter) Inc() { c.v.add(1) }

// Add adds d; it panics if d is negative.
func (c *Counter) Add(d float64) {
	if d < 0 {
		panic("metrics: counter decreased")
	}
	c.v.add(d)
}

// Value is the counter's value.
func (c *Counter) Value() float64 { return c.v.load() }

// CounterVec is a counter family.
type CounterVec struct{ f *family[Counter] }

// NewCounter returns a counter family with the given label names.
func NewCounter(name, help string, labels ...string) *CounterVec {
	return &CounterVec{newFamily(name, help, labels, func() *Counter { return new(Counter) })}
}

// Name is the family's name.
func (c *CounterVec) Name() string { return c.f.name }

// With returns the counter of the label values, in the order of the
// label names.
func (c *CounterVec) With(values ...string) *Counter { return c.f.with(values) }

func (c *CounterVec) write(w *bufio.Writer) error {
	writeHeader(w, c.f.name, c.f.help, "counter")
	for _, s := range c.f.sorted() {
		writeSample(w, c.f.name, c.f.labels, s.values, "", "", s.s.Value())
	}
	return nil
}

// Sample is one series of a GaugeFunc: its label values and its value.
type Sample struct {
	Values []string
	Value  float64
}

// GaugeFunc is a gauge family computed when it is written.
type GaugeFunc struct {
	name, help string
	labels     []string
	fn         func() ([]Sample, error)
}

// NewGaugeFunc returns a gauge family whose series fn returns at each
// write; an error of fn fails the write.
func NewGaugeFunc(name, help string, labels []string, fn func() ([]Sample, error)) *GaugeFunc {
	for _, l := range labels {
		if !validLabel(l) {
			panic(fmt.Sprintf("metrics: %s: invalid label name %q", name, l))
		}
	}
	return &GaugeFunc{name: name, help: help, labels: slices.Clone(labels), fn: fn}
}

// Name is the family's name.
func (g *GaugeFunc) Name() string { return g.name }

func (g *GaugeFunc) write(w *bufio.Writer) error {
	samples, err := g.fn()
	if err != nil {
		return fmt.Errorf("metrics: %s: %w", g.name, err)
	}
	for _, s := range samples {
		if len(s.Values) != len(g.labels) {
			return fmt.Errorf("metrics: %s: %d label values for %d labels", g.name, len(s.Values), len(g.labels))
		}
	}
	samples = slices.Clone(samples)
	slices.SortStableFunc(samples, func(a, b Sample) int { return slices.Compare(a.Values, b.Values) })
	writeHeader(w, g.name, g.help, "gauge")
	for _, s := range samples {
		writeSample(w, g.name, g.labels, s.Values, "", "", s.Value)
	}
	return nil
}

// Histogram counts observations in buckets of fixed upper bounds.
type Histogram struct {
	bounds []float64      // ascending, without +Inf
	counts []atomic.Int64 // per bucket, not cumulative; the last is +Inf
	sum    atomicFloat
	count  atomic.Int64
}

// Observe records v.
func (h *Histogram) Observe(v float64) {
	i, _ := slices.BinarySearch(h.bounds, v) // the first bound >= v
	h.counts[i].Add(1)
	h.sum.add(v)
	h.count.Add(1)
}

// Count is the number of observations.
func (h *Histogram) Count() int64 { return h.count.Load() }

// Sum is the sum of the observations.
func (h *Histogram) Sum() float64 { return h.sum.load() }

// HistogramVec is a histogram family.
type HistogramVec struct {
	f      *family[Histogram]
	bounds []float64
}

// NewHistogram returns a histogram family with the given bucket upper
// bounds (ascending; +Inf is implied) and label names.
func NewHistogram(name, help string, buckets []float64, labels ...string) *HistogramVec {
	if !slices.IsSorted(buckets) || len(slices.Compact(slices.Clone(buckets))) != len(buckets) {
		panic(fmt.Sprintf("metrics: %s: buckets not strictly ascending", name))
	}
	bounds := slices.Clone(buckets)
	if n := len(bounds); n > 0 && math.IsInf(bounds[n-1], 1) {
		bounds = bounds[:n-1]
	}
	mk := func() *Histogram {
		return &Histogram{bounds: bounds, counts: make([]atomic.Int64, len(bounds)+1)}
	}
	return &HistogramVec{f: newFamily(name, help, labels, mk), bounds: bounds}
}

// Name is the family's name.
func (h *HistogramVec) Name() string { return h.f.name }

// With returns the histogram of the label values.
func (h *HistogramVec) With(values ...string) *Histogram { return h.f.with(values) }

func (h *HistogramVec) write(w *bufio.Writer) error {
	writeHeader(w, h.f.name, h.f.help, "histogram")
	for _, s := range h.f.sorted() {
		// Read the count first: the buckets may then hold more, never
		// fewer, so +Inf is made to agree with _count.
		count := s.s.count.Load()
		sum := s.s.sum.load()
		var cum int64
		for i, b := range h.bounds {
			cum += s.s.counts[i].Load()
			writeSample(w, h.f.name+"_bucket", h.f.labels, s.values, "le", FormatValue(b), float64(cum))
		}
		cum += s.s.counts[len(h.bounds)].Load()
		count = max(count, cum)
		writeSample(w, h.f.name+"_bucket", h.f.labels, s.values, "le", "+Inf", float64(count))
		writeSample(w, h.f.name+"_sum", h.f.labels, s.values, "", "", sum)
		writeSample(w, h.f.name+"_count", h.f.labels, s.values, "", "", float64(count))
	}
	return nil
}

// DefaultBuckets are bucket bounds in seconds from 5 ms to 10 s.
var DefaultBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
