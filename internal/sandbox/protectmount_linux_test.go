package sandbox

import "testing"

func TestInnermost(t *testing.T) {
	roots := []string{"/a", "/a/b", "/c"}
	for p, want := range map[string]int{"/a/x": 0, "/a/b/x": 1, "/a/b": 1, "/a/bb": 0, "/c": 2, "/d": -1} {
		if got := innermost(p, roots); got != want {
			t.Errorf("innermost(%s) = %d, want %d", p, got, want)
		}
	}
}
