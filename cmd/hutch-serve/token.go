package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/cli"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// tokenTimeout bounds the making of a token.
const tokenTimeout = 30 * time.Second

const tokenUsage = `Usage: hutch token create --tenant NAME [--e2b] [--state-dir DIR]

Makes an API token for a tenant and prints it (only this once).

The daemon makes it, so that it is the daemon that will accept it, and
records it in its audit log: without --state-dir the daemon at $HUTCH_HOST
(default %s); with --state-dir the daemon that runs on DIR, at the
socket it recorded there. Only the daemon's operator may, on its unix
socket. When no daemon answers at the default socket, or none runs on DIR,
the token is written into the state directory (default %s) for the
daemon started on it later; hutch says so. It refuses when a daemon holds
the state directory but does not answer.

Flags:
`

// cmdToken is `hutch token create`.
func cmdToken(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "create" {
		fmt.Fprintln(stderr, "hutch: usage: hutch token create --tenant NAME [--e2b] [--state-dir DIR]")
		return 2
	}
	fs := flag.NewFlagSet("hutch token create", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tenant := fs.String("tenant", "", "the tenant the token acts as (letters, digits, '.', '_', '-')")
	stateDir := fs.String("state-dir", "", "the state `dir` of the daemon the token is for (default: the daemon at $HUTCH_HOST, else "+defaultStateDir+")")
	e2bShape := fs.Bool("e2b", false, "make the token shaped as an E2B API key (e2b_ and 40 hex digits), for E2B's SDKs; it works for hutch's API too")
	fs.Usage = func() {
		fmt.Fprintf(stderr, tokenUsage, client.DefaultHost, defaultStateDir)
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args[1:], stderr); err != nil {
		return usageCode(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "hutch: token create takes no arguments, got %q\n", fs.Args())
		return 2
	}
	if err := store.CheckTenant(*tenant); err != nil {
		fmt.Fprintf(stderr, "hutch: --tenant: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), tokenTimeout)
	defer cancel()
	opts := client.TokenOptions{Tenant: *tenant, E2B: *e2bShape}
	tm := tokenMaker{ctx: ctx, opts: opts, stderr: stderr}
	token, err := tm.make(*stateDir)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: token create: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "A token for the tenant %q; it is shown only this once:\n%s\n", *tenant, token)
	return 0
}

// tokenMaker makes one token, through a daemon or in a state directory.
type tokenMaker struct {
	ctx    context.Context
	opts   client.TokenOptions
	stderr io.Writer
}

// make makes the token for the daemon at $HUTCH_HOST (stateDir "") or the
// one on stateDir.
func (tm tokenMaker) make(stateDir string) (string, error) {
	if stateDir == "" {
		host, fromEnv := os.Getenv("HUTCH_HOST"), true
		if host == "" {
			host, fromEnv = client.DefaultHost, false
		}
		token, answered, err := tm.viaDaemon(host)
		switch {
		case err == nil:
			return token, nil
		case answered:
			return "", err
		case fromEnv:
			return "", fmt.Errorf("no daemon answers at HUTCH_HOST=%s (%v): start it, or set HUTCH_HOST to its socket; --state-dir DIR writes the token for a daemon not running now", host, err)
		}
		stateDir = defaultStateDir
		fmt.Fprintf(tm.stderr, "hutch: no daemon answers at %s; looking for one on %s\n", host, stateDir)
	}
	return tm.inStateDir(stateDir)
}

// viaDaemon asks the daemon at host for the token; answered says that
// the daemon answered (and refused) rather than that none was reached.
func (tm tokenMaker) viaDaemon(host string) (token string, answered bool, err error) {
	c, err := client.New(host, "")
	if err != nil {
		return "", false, err
	}
	token, err = c.CreateToken(tm.ctx, tm.opts)
	var ae *client.Error
	if errors.As(err, &ae) {
		if errors.Is(err, client.ErrPermission) || errors.Is(err, client.ErrUnauthorized) {
			err = fmt.Errorf("%w; tokens are made by the daemon's operator, on its unix socket (HUTCH_HOST=unix:///PATH)", err)
		}
		return "", true, fmt.Errorf("the daemon at %s refused: %w", host, err)
	}
	return token, false, err
}

// inStateDir makes the token for the daemon on dir: through it when one
// runs there (it holds the directory's lock), at the socket it recorded;
// directly in the directory's store when none does.
func (tm tokenMaker) inStateDir(dir string) (string, error) {
	held, err := lockHeld(dir)
	if err != nil {
		return "", err
	}
	if held {
		b, _ := os.ReadFile(filepath.Join(dir, socketFile))
		host := strings.TrimSpace(string(b))
		if host == "" {
			return "", fmt.Errorf("a hutch serve runs on %s (it holds its lock) but recorded no unix socket there, and only its operator makes tokens, on its socket: start it with --socket PATH, or stop it and run this again", dir)
		}
		token, answered, err := tm.viaDaemon(host)
		if err != nil && !answered {
			return "", fmt.Errorf("a hutch serve runs on %s (it holds its lock) but does not answer at %s (%v): if it listens elsewhere, set HUTCH_HOST to its socket", dir, host, err)
		}
		return token, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	st, err := store.Open(filepath.Join(dir, "state.db"))
	if err != nil {
		return "", err
	}
	defer st.Close()
	create := st.CreateToken
	if tm.opts.E2B {
		create = st.CreateE2BToken
	}
	token, err := create(tm.ctx, tm.opts.Tenant)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(tm.stderr, "hutch: no daemon runs on %s: the token is stored in %s, for a hutch serve started with --state-dir %s\n", dir, filepath.Join(dir, "state.db"), dir)
	return token, nil
}

// lockHeld reports whether a daemon holds the lock of state directory dir
// (see package daemon); false when the directory or its lock file does
// not exist.
func lockHeld(dir string) (bool, error) {
	f, err := os.Open(filepath.Join(dir, "lock"))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("state directory lock: %w", err)
	}
	defer f.Close()
	switch err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); {
	case err == nil:
		return false, nil
	case errors.Is(err, unix.EWOULDBLOCK):
		return true, nil
	default:
		return false, fmt.Errorf("state directory lock: %w", err)
	}
}
