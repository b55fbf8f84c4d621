package sandbox

import (
	"context"
	"io"
	"os"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestRunStreams: the command's stdin, stdout and stderr are Config's
// (pipes here, as hutch mcp wrap gives a server), not hutch's own.
func TestRunStreams(t *testing.T) {
	testutil.RequireRoot(t)
	var s policy.Spec
	if err := s.Normalize(t.TempDir(), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	pipe := func() (*os.File, *os.File) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close(); w.Close() })
		return r, w
	}
	inR, inW := pipe()
	outR, outW := pipe()
	errR, errW := pipe()
	if _, err := inW.WriteString("ping\n"); err != nil {
		t.Fatal(err)
	}
	inW.Close()
	res, err := Run(context.Background(), Config{
		Spec: s, Environ: []string{"PATH=/usr/bin:/bin"},
		Args:  []string{"sh", "-c", `read x; echo "out:$x"; echo "err:$x" >&2; read y || echo eof`},
		Stdin: inR, Stdout: outW, Stderr: errW,
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Run: %v, exit %d", err, res.ExitCode)
	}
	outW.Close()
	errW.Close()
	out, _ := io.ReadAll(outR)
	errOut, _ := io.ReadAll(errR)
	if string(out) != "out:ping\neof\n" || string(errOut) != "err:ping\n" {
		t.Errorf("the command's stdout %q and stderr %q, want %q and %q", out, errOut, "out:ping\neof\n", "err:ping\n")
	}
}
