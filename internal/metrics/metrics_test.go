package metrics

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

func render(t *testing.T, r *Registry) string {
	t.Helper()
	var b strings.Builder
	if _, err := r.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestCounterAndEscaping(t *testing.T) {
	c := NewCounter("x_total", "Things.\nWith a \\ backslash.", "route", "code")
	c.With("b", "200").Add(2)
	c.With("a \"q\"\n\\", "500").Inc()
	var r Registry
	r.Register(c)
	got := render(t, &r)
	want := `# HELP x_total Things.\nWith a \\ backslash.
# TYPE x_total counter
x_total{route="a \"q\"\n\\",code="500"} 1
x_total{route="b",code="200"} 2
`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestUnlabelledStartsAtZero(t *testing.T) {
	var r Registry
	r.Register(NewCounter("b_total", "B."), NewCounter("a_total", "A."))
	want := "# HELP a_total A.\n# TYPE a_total counter\na_total 0\n# HELP b_total B.\n# TYPE b_total counter\nb_total 0\n"
	if got := render(t, &r); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestHistogram(t *testing.T) {
	h := NewHistogram("d_seconds", "D.", []float64{0.1, 1})
	for _, v := range []float64{0.05, 0.1, 0.5, 3} {
		h.With().Observe(v)
	}
	var r Registry
	r.Register(h)
	want := `# HELP d_seconds D.
# TYPE d_seconds histogram
d_seconds_bucket{le="0.1"} 2
d_seconds_bucket{le="1"} 3
d_seconds_bucket{le="+Inf"} 4
d_seconds_sum 3.65
d_seconds_count 4
`
	if got := render(t, &r); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestHistogramLabels(t *testing.T) {
	h := NewHistogram("e_seconds", "E.", []float64{1}, "mode")
	h.With("run").Observe(2)
	var r Registry
	r.Register(h)
	got := render(t, &r)
	for _, line := range []string{
		`e_seconds_bucket{mode="run",le="1"} 0`,
		`e_seconds_bucket{mode="run",le="+Inf"} 1`,
		`e_seconds_sum{mode="run"} 2`,
		`e_seconds_count{mode="run"} 1`,
	} {
		if !strings.Contains(got, line+"\n") {
			t.Errorf("no %q in\n%s", line, got)
		}
	}
}

func TestGaugeFunc(t *testing.T) {
	g := NewGaugeFunc("g", "G.", []string{"state"}, func() ([]Sample, error) {
		return []Sample{{[]string{"z"}, 1.5}, {[]string{"a"}, 0}}, nil
	})
	var r Registry
	r.Register(g)
	want := "# HELP g G.\n# TYPE g gauge\ng{state=\"a\"} 0\ng{state=\"z\"} 1.5\n"
	if got := render(t, &r); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	var bad Registry
	bad.Register(NewGaugeFunc("h", "H.", nil, func() ([]Sample, error) { return nil, errors.New("boom") }))
	if _, err := bad.WriteTo(&strings.Builder{}); err == nil {
		t.Error("no error from a failing gauge")
	}
}

func TestConcurrent(t *testing.T) {
	c := NewCounter("c_total", "C.", "k")
	h := NewHistogram("h_seconds", "H.", DefaultBuckets)
	var r Registry
	r.Register(c, h)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				c.With("a").Inc()
				h.With().Observe(0.01)
				_, _ = r.WriteTo(&strings.Builder{})
			}
		})
	}
	wg.Wait()
	if v := c.With("a").Value(); v != 8000 {
		t.Errorf("counter %v, want 8000", v)
	}
	if n := h.With().Count(); n != 8000 {
		t.Errorf("histogram count %d, want 8000", n)
	}
}

func TestRegisterPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"twice":     func() { var r Registry; r.Register(NewCounter("a", "A."), NewCounter("a", "A.")) },
		"bad name":  func() { var r Registry; r.Register(NewCounter("1a", "A.")) },
		"bad label": func() { NewCounter("a", "A.", "a-b") },
		"le":        func() { NewHistogram("a", "A.", nil, "le") },
		"buckets":   func() { NewHistogram("a", "A.", []float64{2, 1}) },
		"negative":  func() { NewCounter("a", "A.").With().Add(-1) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

func TestFormatValue(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 1e21: "1e+21", 0.005: "0.005", 10: "10"} {
		if got := FormatValue(v); got != want {
			t.Errorf("FormatValue(%v) = %q, want %q", v, got, want)
		}
	}
}
