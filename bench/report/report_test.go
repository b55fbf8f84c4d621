package report

import (
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	v := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tt := range []struct {
		p    float64
		want int
	}{{50, 5}, {90, 9}, {99, 10}, {100, 10}, {0, 1}} {
		if got := Percentile(v, tt.p); got != tt.want {
			t.Errorf("p%v = %d, want %d", tt.p, got, tt.want)
		}
	}
	if got := Percentile([]int{7}, 90); got != 7 {
		t.Errorf("p90 of one value = %d, want 7", got)
	}
	if got := Percentile([]time.Duration(nil), 50); got != 0 {
		t.Errorf("p50 of no values = %v, want 0", got)
	}
	u := []time.Duration{3, 1, 2}
	if got := Percentile(u, 50); got != 2 {
		t.Errorf("p50 of unsorted values = %v, want 2", got)
	}
	if u[0] != 3 || u[1] != 1 || u[2] != 2 {
		t.Errorf("values were reordered: %v", u)
	}
}

func TestTableText(t *testing.T) {
	tb := NewTable(false, "name", "p50 µs", "n")
	tb.Row("a", "12", "1000")
	tb.Row("longer", "3", "7")
	var b strings.Builder
	tb.Print(&b)
	want := "name    p50 µs     n\n" +
		"a           12  1000\n" +
		"longer       3     7\n\n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}
}

func TestTableMarkdown(t *testing.T) {
	tb := NewTable(true, "name", "n")
	tb.Row("a", "1")
	var b strings.Builder
	tb.Print(&b)
	want := "| name | n |\n| --- | ---: |\n| a | 1 |\n\n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}
}
