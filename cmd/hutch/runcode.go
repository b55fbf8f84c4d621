package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/cli"
)

// runCodeUsage is hutch run-code's synopsis.
const runCodeUsage = "ID [-l LANG] [--context CTX] [-e NAME=VALUE]... [--out DIR] (-c CODE | FILE | -)"

// cmdRunCode is "hutch run-code ID (-c CODE | FILE | -)": it runs code in
// the code interpreter of sandbox ID (one of an image with Jupyter
// kernels), streams its stdout and stderr, prints the value of its last
// expression, and saves its rich results (plots, HTML, a chart's data)
// as files. It exits 1 when the code raised an exception (printed on
// stderr with its traceback) or the daemon refused, 2 after a usage
// error. Ctrl-C interrupts the execution.
func cmdRunCode(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := remoteFlags("run-code", runCodeUsage, stderr)
	var lang string
	fs.StringVar(&lang, "l", "", "the `language` whose default context runs the code (python, javascript, …; default python)")
	fs.StringVar(&lang, "language", "", "the `language` (as -l)")
	cctx := fs.String("context", "", "run in the context `CTX` (an id from the API's code contexts) instead of a language's default one")
	var env cli.List
	fs.Var(&env, "e", "set `NAME=VALUE` for this execution only (repeatable)")
	fs.Var(&env, "env", "set `NAME=VALUE` (as -e)")
	out := fs.String("out", "", "save rich results (png, jpeg, svg, pdf, html, chart and data JSON) in `dir` (default: the current directory)")
	code := fs.String("c", "", "the `code` to run (instead of FILE, or - for stdin)")
	// Flags may come before and after ID, as in the synopsis.
	if err := cli.Parse(fs, args, stderr); err != nil {
		return usageCode(err)
	}
	var operands []string
	for rest := fs.Args(); len(rest) > 0; rest = fs.Args() {
		operands = append(operands, rest[0])
		if err := cli.Parse(fs, rest[1:], stderr); err != nil {
			return usageCode(err)
		}
	}
	codeSet := false
	fs.Visit(func(f *flag.Flag) { codeSet = codeSet || f.Name == "c" })
	if len(operands) == 0 || codeSet && len(operands) != 1 || !codeSet && len(operands) != 2 {
		fmt.Fprintf(stderr, "hutch: usage: hutch run-code %s\n", runCodeUsage)
		return 2
	}
	id := operands[0]
	if !codeSet {
		var b []byte
		var err error
		if operands[1] == "-" {
			b, err = io.ReadAll(stdin)
		} else {
			b, err = os.ReadFile(operands[1])
		}
		if err != nil {
			fmt.Fprintf(stderr, "hutch: run-code: %v\n", err)
			return 1
		}
		*code = string(b)
	}
	envMap, err := keyValues("env", env)
	if err != nil {
		fmt.Fprintf(stderr, "hutch: %v\n", err)
		return 2
	}
	c, ok := newClient(stderr)
	if !ok {
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ex, err := c.RunCode(ctx, id, client.RunCodeRequest{
		Code: *code, Language: lang, Context: *cctx, Env: envMap,
		OnStdout: func(s string) { _, _ = io.WriteString(stdout, s) },
		OnStderr: func(s string) { _, _ = io.WriteString(stderr, s) },
	})
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "hutch: run-code: interrupted")
			return 130
		}
		fmt.Fprintf(stderr, "hutch: run-code: %v\n", err)
		return 1
	}
	dir := *out
	if dir == "" {
		dir = "."
	}
	code1 := 0
	for i, r := range ex.Results {
		if r.IsMainResult && r.Text != "" {
			text := r.Text
			if !strings.HasSuffix(text, "\n") {
				text += "\n"
			}
			_, _ = io.WriteString(stdout, text)
		}
		for _, f := range resultFiles(r) {
			name, err := saveResult(dir, fmt.Sprintf("result-%d-%d", ex.ExecutionCount, i+1), f)
			if err != nil {
				fmt.Fprintf(stderr, "hutch: run-code: save the %s result: %v\n", f.ext, err)
				code1 = 1
				continue
			}
			fmt.Fprintf(stderr, "hutch: saved %s (%s, %d bytes)\n", name, f.format, len(f.data))
		}
	}
	if e := ex.Error; e != nil {
		fmt.Fprintf(stderr, "%s: %s\n", e.Name, e.Value)
		if e.Traceback != "" {
			tb := e.Traceback
			if !strings.HasSuffix(tb, "\n") {
				tb += "\n"
			}
			_, _ = io.WriteString(stderr, tb)
		}
		return 1
	}
	return code1
}

// resultFile is a rich result's format as a file.
type resultFile struct {
	format string // as the result names it
	ext    string // the file's extension
	data   []byte
}

// resultFiles are the formats of r saved as files: images, documents and
// JSON values (text, markdown and LaTeX are not).
func resultFiles(r client.CodeResult) []resultFile {
	var out []resultFile
	b64 := func(format, ext, s string) {
		if s == "" {
			return
		}
		if b, err := base64.StdEncoding.DecodeString(s); err == nil {
			out = append(out, resultFile{format, ext, b})
		}
	}
	plain := func(format, ext string, b []byte) {
		if len(b) > 0 {
			out = append(out, resultFile{format, ext, b})
		}
	}
	b64("png", "png", r.PNG)
	b64("jpeg", "jpg", r.JPEG)
	b64("pdf", "pdf", r.PDF)
	plain("svg", "svg", []byte(r.SVG))
	plain("html", "html", []byte(r.HTML))
	plain("chart", "chart.json", r.Chart)
	plain("data", "data.json", r.Data)
	plain("json", "json", r.JSON)
	return out
}

// saveResult writes f as dir/base.EXT, or base-2.EXT and so on if that
// file exists (a fresh context counts its executions from 1 again), and
// returns the path it wrote.
func saveResult(dir, base string, f resultFile) (string, error) {
	for n := 1; ; n++ {
		name := base
		if n > 1 {
			name += "-" + strconv.Itoa(n)
		}
		p := filepath.Join(dir, name+"."+f.ext)
		w, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, os.ErrExist) && n < 1000 {
			continue
		}
		if err != nil {
			return "", err
		}
		if _, err := w.Write(f.data); err != nil {
			w.Close()
			return "", err
		}
		return p, w.Close()
	}
}
