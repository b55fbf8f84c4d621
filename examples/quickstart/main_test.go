package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/api"
	"github.com/hutch-sandbox/hutch/internal/api/apitest"
)

// readmeProgram is the Go program between the README's sdk-example
// markers.
func readmeProgram(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- sdk-example:begin -->\n```go\n(.*?)```\n<!-- sdk-example:end -->").FindSubmatch(b)
	if m == nil {
		t.Fatal("README.md has no Go program between <!-- sdk-example:begin --> and <!-- sdk-example:end -->")
	}
	return string(m[1])
}

// TestREADME: the README's SDK example is this program, which go vet and
// go build check with the rest of the module.
func TestREADME(t *testing.T) {
	b, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if readmeProgram(t) != string(b) {
		t.Error("the README's SDK example differs from examples/quickstart/main.go: copy the file into the README")
	}
}

// goTool runs the go command in dir and fails the test if it fails.
func goTool(t *testing.T, dir string, env []string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"GOWORK=off", "CGO_ENABLED=0"}, env...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestOwnModule: the README's way into a module of one's own works from a
// clone, without the network: go mod edit -replace, go get, go build.
func TestOwnModule(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(readmeProgram(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	offline := []string{"GOPROXY=off", "GOFLAGS=-mod=mod"}
	goTool(t, dir, offline, "mod", "init", "example.com/myagent")
	goTool(t, dir, offline, "mod", "edit", "-replace", "github.com/hutch-sandbox/hutch="+root)
	goTool(t, dir, offline, "get", "github.com/hutch-sandbox/hutch/client")
	goTool(t, dir, offline, "build", "-o", "myagent", ".")
}

// TestRun runs the program against an API served over a unix socket, as
// a user runs it against hutch serve (its sandboxes are package apitest's:
// directories whose commands run unisolated).
func TestRun(t *testing.T) {
	dir := t.TempDir()
	m, err := apitest.NewManager(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	sock := filepath.Join(dir, "hutch.sock")
	ls, err := api.Listen(sock, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- api.Serve(ctx, api.New(m, nil), nil, ls...) }()
	defer func() {
		cancel()
		<-served
	}()

	bin := filepath.Join(dir, "quickstart")
	goTool(t, ".", nil, "build", "-o", bin, ".")
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "HUTCH_HOST=unix://"+sock)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("quickstart: %v\n%s", err, stderr.String())
	}
	if !regexp.MustCompile(`^sandbox \S+: done\nexit code 3\nHELLO FROM THE HOST\n$`).MatchString(stdout.String()) {
		t.Errorf("quickstart printed %q", stdout.String())
	}
	if sbs, err := m.List(context.Background(), api.AdminTenant, nil, ""); err != nil || len(sbs) != 0 {
		t.Errorf("after quickstart: %d sandboxes, %v; want it to destroy its own", len(sbs), err)
	}
}
