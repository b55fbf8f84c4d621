package testutil

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// CodeInterpreterImageEnv names the environment variable that gives the
// tests of the code interpreter the tarball of hutch's code-interpreter
// image (docker save; scripts/base-image.sh --code-interpreter makes it).
const CodeInterpreterImageEnv = "HUTCH_TEST_CODE_INTERPRETER_IMAGE"

// CodeInterpreterRef is the reference the code-interpreter image's
// tarball tags it with.
const CodeInterpreterRef = "hutch.local/code-interpreter:latest"

// codeInterpreterGlob is where scripts/base-image.sh leaves the tarball.
const codeInterpreterGlob = "/var/cache/hutch/base-image/code-interpreter-*.tar"

// CodeInterpreterImage returns the tarball of the code-interpreter image:
// $HUTCH_TEST_CODE_INTERPRETER_IMAGE, else the newest the image script
// left in its cache. Without one the test skips with the reason, or fails
// when HUTCH_TEST_ROOT=1.
func CodeInterpreterImage(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(CodeInterpreterImageEnv); p != "" {
		_, err := os.Stat(p)
		Need(t, err == nil, "$"+CodeInterpreterImageEnv+": "+p+": no such file")
		return p
	}
	ms, _ := filepath.Glob(codeInterpreterGlob)
	Need(t, len(ms) > 0, "no tarball of the code-interpreter image: set $"+CodeInterpreterImageEnv+" or run scripts/base-image.sh --code-interpreter")
	slices.SortFunc(ms, func(a, b string) int {
		fa, _ := os.Stat(a)
		fb, _ := os.Stat(b)
		if fa == nil || fb == nil {
			return 0
		}
		return fb.ModTime().Compare(fa.ModTime())
	})
	return ms[0]
}
