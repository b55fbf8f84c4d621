package client_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/api"
	"github.com/hutch-sandbox/hutch/internal/api/apitest"
)

// The tests and examples of this package talk to a real API handler over
// a unix socket and TCP; its sandboxes are package apitest's: plain
// directories whose commands run unisolated, as the test's user.

var (
	testManager *apitest.Manager
	testSocket  string // HUTCH_HOST for every test
	testTCP     string // http://127.0.0.1:PORT
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "hutch-client-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	testManager, err = apitest.NewManager(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer testManager.Close()
	h, err := api.NewWithConfig(testManager, api.Config{MaxOutput: 1 << 20, MaxUpload: 8 << 20})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sock := filepath.Join(dir, "hutch.sock")
	ls, err := api.Listen(sock, "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- api.Serve(ctx, h, nil, ls...) }()
	defer func() {
		cancel()
		<-served
	}()
	testSocket = "unix://" + sock
	testTCP = "http://" + ls[1].Addr().String()
	os.Setenv("HUTCH_HOST", testSocket)
	os.Unsetenv("HUTCH_TOKEN")
	return m.Run()
}
