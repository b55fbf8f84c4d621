package gvisor

import "testing"

func TestUnescapeMountinfo(t *testing.T) {
	for in, want := range map[string]string{
		`/run/a`:             "/run/a",
		`/run/with\040space`: "/run/with space",
		`/tab\011x\134y`:     "/tab\tx\\y",
		`/short\04`:          `/short\04`,
	} {
		if got := unescapeMountinfo(in); got != want {
			t.Errorf("unescapeMountinfo(%q) = %q, want %q", in, got, want)
		}
	}
}
