package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/cli"
)

// cmdAudit checks the daemon's audit log: hutch audit verify [--state-dir
// DIR | FILE]. It exits 0 when the chain holds, 1 when a line is bad or
// the log cannot be read, 2 when called wrongly.
func cmdAudit(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "verify" {
		fmt.Fprintln(stderr, "hutch: usage: hutch audit verify [--state-dir DIR | FILE]")
		return 2
	}
	fs := flag.NewFlagSet("hutch audit verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stateDir := fs.String("state-dir", "", "check the audit log in the daemon's state `dir` (default "+cli.DefaultStateDir+")")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: hutch audit verify [--state-dir DIR | FILE]\n\nChecks the hash chain of the daemon's audit log.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args[1:], stderr); err != nil {
		return usageCode(err)
	}
	var path string
	switch {
	case fs.NArg() > 1, fs.NArg() == 1 && *stateDir != "":
		fmt.Fprintln(stderr, "hutch: usage: hutch audit verify [--state-dir DIR | FILE]")
		return 2
	case fs.NArg() == 1:
		path = fs.Arg(0)
	case *stateDir != "":
		path = filepath.Join(*stateDir, audit.FileName)
	default:
		path = filepath.Join(cli.DefaultStateDir, audit.FileName)
	}
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return 1
	}
	defer f.Close()
	n, err := audit.Verify(f)
	var ve *audit.VerifyError
	switch {
	case errors.As(err, &ve):
		fmt.Fprintf(stderr, "hutch: audit log %s is not intact: %v (%d entries before it are good)\n", path, err, n)
		return 1
	case err != nil:
		fmt.Fprintf(stderr, "hutch: %s: %v\n", path, err)
		return 1
	}
	fmt.Fprintf(stdout, "audit log OK: %d entries\n", n)
	return 0
}
