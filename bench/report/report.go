// Package report formats the results of hutch's benchmark programs:
// tables printed as aligned text or as markdown (for docs/benchmarks.md),
// and the percentiles of the samples they hold.
package report

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Table is a table of text cells: a header row, then the rows added by Row.
type Table struct {
	markdown bool
	rows     [][]string
}

// NewTable returns a table with the header head, printed as markdown when
// markdown is set and as aligned text otherwise.
func NewTable(markdown bool, head ...string) *Table {
	return &Table{markdown: markdown, rows: [][]string{head}}
}

// Row adds a row of cells.
func (t *Table) Row(cells ...string) { t.rows = append(t.rows, cells) }

// Print writes the table to w, followed by an empty line. As markdown, the
// first column is left-aligned and the others right-aligned. As text, the
// columns are two spaces apart, padded to their widest cell in runes, the
// first left-aligned and the others right-aligned.
func (t *Table) Print(w io.Writer) {
	if t.markdown {
		for i, r := range t.rows {
			line(w, r)
			if i == 0 {
				sep := make([]string, len(r))
				for j := range sep {
					sep[j] = "---:"
				}
				sep[0] = "---"
				line(w, sep)
			}
		}
		fmt.Fprintln(w)
		return
	}
	width := make([]int, len(t.rows[0]))
	for _, r := range t.rows {
		for j, c := range r {
			if j < len(width) {
				width[j] = max(width[j], utf8.RuneCountInString(c))
			}
		}
	}
	for _, r := range t.rows {
		var b strings.Builder
		for j, c := range r {
			pad := 0
			if j < len(width) {
				pad = width[j] - utf8.RuneCountInString(c)
			}
			if j == 0 {
				b.WriteString(c + strings.Repeat(" ", pad))
			} else {
				b.WriteString("  " + strings.Repeat(" ", pad) + c)
			}
		}
		fmt.Fprintln(w, b.String())
	}
	fmt.Fprintln(w)
}

func line(w io.Writer, cells []string) { fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | ")) }

// Percentile returns the p-th percentile (0 to 100) of values by nearest
// rank: the value of rank ⌈p/100 × n⌉ in ascending order, the smallest for
// p = 0. values need not be sorted and are left as they are. It returns the
// zero value for no values.
func Percentile[T cmp.Ordered](values []T, p float64) T {
	if len(values) == 0 {
		var zero T
		return zero
	}
	s := values
	if !slices.IsSorted(s) {
		s = slices.Clone(values)
		slices.Sort(s)
	}
	k := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(k, len(s)-1))]
}

// Ms is d in milliseconds, to two decimals.
func Ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

// Ratio is a/b to two decimals, or "-" when b is zero.
func Ratio[T time.Duration | float64](a, b T) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(a)/float64(b))
}

// Met says whether a target was met.
func Met(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}
