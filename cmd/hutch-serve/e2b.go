package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"

	"github.com/hutch-sandbox/hutch/internal/e2b"
	"github.com/hutch-sandbox/hutch/internal/envd"
)

// envdRoutes returns which paths belong to E2B's in-sandbox API (envd) and
// its handler, which serves the sandbox rest resolved for each request
// (and records its calls in the audit log of the e2b handler that
// resolved it, if that has one).
func envdRoutes(log *slog.Logger) (func(string) bool, http.Handler) {
	return envd.Paths, envd.New(func(r *http.Request) (envd.Sandbox, error) {
		s, ok := e2b.Resolved(r)
		if !ok {
			return envd.Sandbox{}, &envd.Error{Code: "unauthenticated", Message: "no sandbox resolved for this request"}
		}
		return s.Envd(), nil
	}, log)
}

// stateKey is the key of size random bytes in file (mode 0600), made if
// the file does not exist: E2B's access tokens are derived from it, so
// that they outlive a restart of the daemon.
func stateKey(file string, size int) ([]byte, error) {
	key, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		key = make([]byte, size)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return stateKey(file, size) // made meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("e2b key: %w", err)
		}
		_, err = f.Write(key)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(file)
			return nil, fmt.Errorf("e2b key: %w", err)
		}
		return key, nil
	}
	if err != nil {
		return nil, fmt.Errorf("e2b key: %w", err)
	}
	if len(key) != size {
		return nil, fmt.Errorf("e2b key: %s holds %d bytes, want %d (remove it to make another: the E2B sandboxes' access tokens change)", file, len(key), size)
	}
	return key, nil
}
