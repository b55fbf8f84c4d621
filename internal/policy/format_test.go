package policy

import (
	"strings"
	"testing"
)

// TestFormatHomeNote: the printed policy says what its home mode means,
// on the line that sets it, and reads back as the same mode.
func TestFormatHomeNote(t *testing.T) {
	for _, mode := range HomeModes {
		s := Spec{Filesystem: Filesystem{Home: mode}}
		out, err := s.Format()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(out), "\n  home: "+mode+" # "+homeNote(mode)+"\n") || homeNote(mode) == "" {
			t.Errorf("home %s: no note in\n%s", mode, out)
		}
		back, err := Parse("shown.yaml", out)
		if err != nil || back.Filesystem.Home != mode {
			t.Errorf("home %s: read back %q, %v", mode, back.Filesystem.Home, err)
		}
	}
}
