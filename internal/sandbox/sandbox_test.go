package sandbox

import (
	"fmt"
	"slices"
	"testing"
)

// TestRefusalReport: the end-of-run lines name at most five refusals, each
// with its rule and count, say how many more there were, and gather each
// distinct fix once; without refusals there is nothing to say.
func TestRefusalReport(t *testing.T) {
	if got := RefusalReport(nil, 0); got != nil {
		t.Errorf("no refusals: %q", got)
	}
	one := []FileRefusal{{Path: "/h/.netrc", Op: "read", Rule: "deny-read", Allow: "--allow-read /h/.netrc", Count: 1}}
	if got, want := RefusalReport(one, 0), []string{
		"hutch: refused 1 file access: read /h/.netrc (deny-read)",
		"hutch: to allow it: --allow-read /h/.netrc",
	}; !slices.Equal(got, want) {
		t.Errorf("one refusal:\n%q\nwant\n%q", got, want)
	}
	var many []FileRefusal
	for i := range 7 {
		many = append(many, FileRefusal{Path: fmt.Sprintf("/h/.ssh/k%d", i), Op: "read", Rule: "deny-read, a default", Allow: "--allow-read /h/.ssh", Count: 2})
	}
	many = append(many, FileRefusal{Path: "/w/.bashrc", Op: "write", Rule: "protected", Count: 1})
	got := RefusalReport(many, 3)
	want := []string{
		"hutch: refused 18 file accesses: read /h/.ssh/k0 (deny-read, a default) ×2, read /h/.ssh/k1 (deny-read, a default) ×2, " +
			"read /h/.ssh/k2 (deny-read, a default) ×2, read /h/.ssh/k3 (deny-read, a default) ×2, read /h/.ssh/k4 (deny-read, a default) ×2, and 3 more",
		"hutch: to allow them: --allow-read /h/.ssh",
	}
	if !slices.Equal(got, want) {
		t.Errorf("many refusals:\n%q\nwant\n%q", got, want)
	}
	if got := RefusalReport(many[7:], 4); len(got) != 1 || got[0] != "hutch: refused 5 file accesses: write /w/.bashrc (protected), and more" {
		t.Errorf("a protected path and unkept ones: %q", got)
	}
}
