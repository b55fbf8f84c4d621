package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/client"
)

// Create a sandbox, run a command in it, and destroy it. The client finds
// the daemon at $HUTCH_HOST (by default its unix socket).
func Example() {
	ctx := context.Background()
	var c client.Client
	sb, err := c.Create(ctx, client.CreateOptions{Timeout: 10 * time.Minute, Labels: map[string]string{"job": "example"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Destroy(ctx, sb.ID)

	res, err := c.Run(ctx, sb.ID, client.Command{Args: []string{"sh", "-c", "echo hello from the sandbox; exit 3"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%sexit code %d\n", res.Stdout, res.Code)
	// Output:
	// hello from the sandbox
	// exit code 3
}

// Connect to a daemon over TCP with a token made by `hutch token create`.
func ExampleNew() {
	c, err := client.New("http://127.0.0.1:7070", os.Getenv("HUTCH_TOKEN"))
	if err != nil {
		log.Fatal(err)
	}
	sbs, err := c.List(context.Background(), client.ListOptions{Labels: map[string]string{"team": "infra"}})
	if err != nil {
		log.Fatal(err)
	}
	for _, sb := range sbs {
		fmt.Println(sb.ID, sb.State, sb.ExpiresAt)
	}
}

// Stream a command's input and output.
func ExampleClient_Exec() {
	ctx := context.Background()
	var c client.Client
	sb, err := c.Create(ctx, client.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Destroy(ctx, sb.ID)

	p, err := c.Exec(ctx, sb.ID, client.Command{Args: []string{"tr", "a-z", "A-Z"}, Stdin: true})
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		io.WriteString(p.Stdin, "shout this\n")
		p.Stdin.Close()
	}()
	go io.Copy(os.Stderr, p.Stderr)
	out, _ := io.ReadAll(p.Stdout)
	status, err := p.Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%sexit code %d\n", out, status.Code)
	// Output:
	// SHOUT THIS
	// exit code 0
}

// Run an interactive command on a terminal, forwarding window sizes.
func ExampleProcess_Resize() {
	ctx := context.Background()
	var c client.Client
	p, err := c.Exec(ctx, "sb-123", client.Command{Args: []string{"bash"}, Stdin: true, TTY: true, Rows: 24, Cols: 80})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	go io.Copy(p.Stdin, os.Stdin)
	go io.Copy(os.Stdout, p.Stdout)
	_ = p.Resize(50, 132) // when the local terminal changes size
	status, err := p.Wait()
	fmt.Println(status.Code, err)
}

// Write a file into a sandbox and read it back.
func ExampleClient_WriteFile() {
	ctx := context.Background()
	var c client.Client
	sb, err := c.Create(ctx, client.CreateOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Destroy(ctx, sb.ID)

	path := sb.Workspace + "/greeting.txt"
	if _, err := c.WriteFile(ctx, sb.ID, path, strings.NewReader("hello, file\n"), 0o644); err != nil {
		log.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := c.ReadFile(ctx, sb.ID, path, &buf); err != nil {
		log.Fatal(err)
	}
	fi, err := c.Stat(ctx, sb.ID, path)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(buf.String())
	fmt.Println(fi.Size, fi.Mode)
	// Output:
	// hello, file
	// 12 -rw-r--r--
}

// Tell a missing sandbox from other failures.
func ExampleError() {
	var c client.Client
	_, err := c.Get(context.Background(), "no-such-sandbox")
	var e *client.Error
	if errors.As(err, &e) {
		fmt.Println(errors.Is(err, client.ErrNotFound), e.Status, e.Code)
	}
	// Output:
	// true 404 not_found
}
