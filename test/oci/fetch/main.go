// Command fetch is the tests' HTTP client inside a container: it gets a
// URL through the proxy the environment names (Go's net/http honours
// HTTP(S)_PROXY), trusting the roots SSL_CERT_FILE names, with the
// headers given as NAME=VALUE arguments after the URL, and prints the
// status and the body, or the error.
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: fetch URL [HEADER=VALUE]...")
		os.Exit(2)
	}
	req, err := http.NewRequest("GET", os.Args[1], nil)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	for _, h := range os.Args[2:] {
		k, v, _ := strings.Cut(h, "=")
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	fmt.Printf("status %d\n%s", resp.StatusCode, body)
	if resp.StatusCode != http.StatusOK {
		os.Exit(1)
	}
}
