package interp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/kernel"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// testNode is the node the tests run: $HUTCH_TEST_NODE (to try another
// version, such as Debian 12's Node 18), else node on PATH.
func testNode(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("HUTCH_TEST_NODE"); p != "" {
		return p
	}
	p, err := exec.LookPath("node")
	testutil.Need(t, err == nil, "needs node on PATH (Debian: nodejs)")
	return p
}

func needTypeScript(t *testing.T) {
	t.Helper()
	_, err := os.Stat(filepath.Join(DefaultTypeScriptModule, "package.json"))
	testutil.Need(t, err == nil, "needs TypeScript in "+DefaultTypeScriptModule+" (Debian: node-typescript)")
}

func startNode(t *testing.T, cfg NodeConfig) *Node {
	t.Helper()
	cfg.Node = testNode(t)
	if cfg.TypeScriptModule == "" {
		// Cells of either language are parsed with TypeScript.
		needTypeScript(t)
	}
	if cfg.Log == nil {
		cfg.Log = &testutil.Buffer{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, err := StartNode(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// cell is what one execution produced.
type cell struct {
	outs  []kernel.Output
	reply kernel.Reply
}

func (c cell) stream(name string) string {
	var b strings.Builder
	for _, o := range c.outs {
		if s, ok := o.(*kernel.Stream); ok && s.Name == name {
			b.WriteString(s.Text)
		}
	}
	return b.String()
}

// result is the text/plain of the cell's main result, "" if none.
func (c cell) result(t *testing.T) string {
	t.Helper()
	var out []string
	for _, o := range c.outs {
		if r, ok := o.(*kernel.Result); ok {
			if !r.Main {
				t.Errorf("a result that is not main: %v", r.Data)
			}
			s, _ := r.Text("text/plain")
			out = append(out, s)
		}
	}
	if len(out) > 1 {
		t.Errorf("%d results: %q", len(out), out)
	}
	if len(out) == 0 {
		return ""
	}
	return out[0]
}

func (c cell) err() *kernel.Error {
	for _, o := range c.outs {
		if e, ok := o.(*kernel.Error); ok {
			return e
		}
	}
	return nil
}

func execute(t *testing.T, n *Node, code string, opts kernel.ExecuteOptions) (cell, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var c cell
	var err error
	c.reply, err = n.Execute(ctx, code, opts, func(o kernel.Output) { c.outs = append(c.outs, o) })
	return c, err
}

// ok runs code, which must not fail, and returns what it produced.
func ok(t *testing.T, n *Node, code string) cell {
	t.Helper()
	c, err := execute(t, n, code, kernel.ExecuteOptions{})
	if err != nil {
		t.Fatalf("%s: %v", code, err)
	}
	if e := c.err(); e != nil || c.reply.Status != "ok" {
		t.Fatalf("%s: status %s, error %v\n%s", code, c.reply.Status, e, strings.Join(tracebackOf(e), "\n"))
	}
	return c
}

func tracebackOf(e *kernel.Error) []string {
	if e == nil {
		return nil
	}
	return e.Traceback
}

// value runs code and returns its result's text.
func value(t *testing.T, n *Node, code string) string {
	t.Helper()
	return ok(t, n, code).result(t)
}

type valueCase struct{ code, want string }

// values runs each case's code in turn and checks its result's text.
func values(t *testing.T, n *Node, cases []valueCase) {
	t.Helper()
	for _, tc := range cases {
		if got := value(t, n, tc.code); got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.code, got, tc.want)
		}
	}
}

// fails runs code, which must raise, and returns the error.
func fails(t *testing.T, n *Node, code string) *kernel.Error {
	t.Helper()
	c, err := execute(t, n, code, kernel.ExecuteOptions{})
	if err != nil {
		t.Fatalf("%s: %v", code, err)
	}
	e := c.err()
	if e == nil || c.reply.Status != "error" || c.reply.Error == nil {
		t.Fatalf("%s: status %s, no error: %v", code, c.reply.Status, c.outs)
	}
	if c.reply.Error.Name != e.Name || c.reply.Error.Value != e.Value {
		t.Errorf("reply error %v, output error %v", c.reply.Error, e)
	}
	return e
}

func TestNodeState(t *testing.T) {
	n := startNode(t, NodeConfig{})
	values(t, n, []valueCase{
		{"const x = 1", ""},
		{"x + 1", "2"},
		{"let y = 2; var z = 3\nfunction f(a) { return a * 10 }\nclass C { get v() { return 7 } }", ""},
		{"y + z + f(1) + new C().v", "22"},
		{"const {a, b: [c, , d = 5], ...rest} = {a: 1, b: [2, 3], e: 4, g: 6}", ""},
		{"[a, c, d, rest]", "[ 1, 2, 5, { e: 4, g: 6 } ]"},
		{"const x = 'again'", ""},
		{"x", "'again'"},
		{"let u; u", ""},
		{"let u = 1, w", ""},
		{"[u, w]", "[ 1, undefined ]"},
		{"g(); function g() { return 1 }", ""},
		{"g()", "1"},
		{"class C { static k = 'new' }; C.k", "'new'"},
		{"let counter = 0; const inc = () => ++counter; inc(); inc()", "2"},
		{"counter", "2"},
		{"{a: 1, b: 'two'}", "{ a: 1, b: 'two' }"},
		{"for (let i = 0; i < 3; i++) {}\nlet i = 'top'; i", "'top'"},
		{"if (true) { 5 }", ""},
	})
}

func TestNodeOutput(t *testing.T) {
	n := startNode(t, NodeConfig{})
	c := ok(t, n, "console.log('Hello World!')")
	if got := c.stream("stdout"); got != "Hello World!\n" {
		t.Errorf("stdout %q", got)
	}
	if got := c.result(t); got != "" {
		t.Errorf("console.log has the result %q", got)
	}
	c = ok(t, n, "console.log('a', 1, {b: [2]}); console.error('e1'); process.stdout.write('b'); console.warn('e2'); process.stdout.write(Buffer.from('c\\n')); process.stderr.write('e3\\n'); 'end'")
	if got, want := c.stream("stdout"), "a 1 { b: [ 2 ] }\nbc\n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	if got, want := c.stream("stderr"), "e1\ne2\ne3\n"; got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
	if _, isResult := c.outs[len(c.outs)-1].(*kernel.Result); !isResult || c.result(t) != "'end'" {
		t.Errorf("the result is not last: %v", c.outs)
	}

	// Output in order, across awaits, all of it before the end.
	c = ok(t, n, "for (let i = 0; i < 200; i++) { console.log(i); if (i % 50 == 0) await new Promise(r => setTimeout(r, 1)) }")
	var want strings.Builder
	for i := range 200 {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if got := c.stream("stdout"); got != want.String() {
		t.Errorf("ordered output: got %q", got)
	}

	// Output of a cell after it ended goes to the log, not to the next.
	log := &testutil.Buffer{}
	n = startNode(t, NodeConfig{Log: log})
	ok(t, n, "setTimeout(() => console.log('late'), 100); 1")
	c = ok(t, n, "await new Promise(r => setTimeout(r, 300)); console.log('mine')")
	if got := c.stream("stdout"); got != "mine\n" {
		t.Errorf("the next cell's stdout: %q", got)
	}
	if !testutil.Eventually(time.Minute, func() bool { return strings.Contains(log.String(), "late") }) {
		t.Errorf("no late output in the log: %q", log.String())
	}
}

func TestNodeResults(t *testing.T) {
	n := startNode(t, NodeConfig{})
	c := ok(t, n, "'Hello World!'")
	var in []int
	for _, o := range c.outs {
		if i, ok := o.(*kernel.Input); ok {
			in = append(in, i.ExecutionCount)
		}
	}
	if len(in) != 1 || in[0] != 1 || c.reply.ExecutionCount != 1 {
		t.Errorf("inputs %v, reply count %d", in, c.reply.ExecutionCount)
	}
	if _, first := c.outs[0].(*kernel.Input); !first {
		t.Errorf("the input is not first: %v", c.outs)
	}
	if got := c.result(t); got != "'Hello World!'" {
		t.Errorf("result %q", got)
	}
	for _, o := range c.outs {
		if r, ok := o.(*kernel.Result); ok && r.ExecutionCount != 1 {
			t.Errorf("result count %d", r.ExecutionCount)
		}
	}
	values(t, n, []valueCase{
		{"undefined", ""},
		{"null", "null"},
		{"await Promise.resolve('Hello World!')", "'Hello World!'"},
		{"Promise.resolve(42)", "42"},
		{"const p = new Promise(r => setTimeout(() => r([1, 2]), 10)); await p", "[ 1, 2 ]"},
		{"const later = await Promise.resolve(3); later * 2", "6"},
		{"later", "3"},
		{"async function af() { return 'af' }\nawait af()", "'af'"},
		{"af", "[AsyncFunction: af]"},
		{"class K {}; await 0; new K()", "K {}"},
		{"for await (const v of [Promise.resolve(1)]) { console.log(v) }", ""},
		{"new Map([[1, 'a']])", "Map(1) { 1 => 'a' }"},
		{"new Error('a value')", "Error: a value\n    at <cell 14>:1:1"},
	})

	// Silent: no input, no result, no count; state changes all the same.
	c, err := execute(t, n, "process.env.HUTCH_TEST_VAR = 'set'; 5", kernel.ExecuteOptions{Silent: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range c.outs {
		t.Errorf("a silent execution output %#v", o)
	}
	c = ok(t, n, "process.env.HUTCH_TEST_VAR")
	if got := c.result(t); got != "'set'" {
		t.Errorf("after the silent execution: %q", got)
	}
	if want := 15; c.reply.ExecutionCount != want {
		t.Errorf("count %d, want %d", c.reply.ExecutionCount, want)
	}
}

func TestNodeImports(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"node_modules/local-pkg/package.json": `{"name": "local-pkg", "main": "main.js"}`,
		"node_modules/local-pkg/main.js":      "exports.hello = () => 'hello from local-pkg'",
		"node_modules/esm-shaped/index.js":    "Object.defineProperty(exports, '__esModule', {value: true}); exports.default = 'the default'; exports.named = 'named'",
		"data.txt":                            "some data",
		"lib/esm.mjs":                         "export const e = 'from an ES module'",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	n := startNode(t, NodeConfig{Dir: dir})
	values(t, n, []valueCase{
		{"import { readFileSync } from 'fs'\nreadFileSync('data.txt', 'utf8')", "'some data'"},
		{"readFileSync === require('fs').readFileSync", "true"},
		{"import fs from 'fs'; import * as path from 'node:path'; import { join as j } from 'path'", ""},
		{"[typeof fs.readdirSync, path.basename('/a/b'), j('x', 'y')]", "[ 'function', 'b', 'x/y' ]"},
		{"import dflt, { named } from 'esm-shaped'; [dflt, named]", "[ 'the default', 'named' ]"},
		{"import 'local-pkg'; import { hello } from 'local-pkg'; hello()", "'hello from local-pkg'"},
		{"require('local-pkg').hello()", "'hello from local-pkg'"},
		{"export const exported = 1; export function ef() { return exported }\nef()", "1"},
		{"const { e } = await import('./lib/esm.mjs'); e", "'from an ES module'"},
		{"(await import('local-pkg')).default.hello()", "'hello from local-pkg'"},
		{"import('node:os').then(os => typeof os.cpus)", "'function'"},
	})
	e := fails(t, n, "import nothing from 'no-such-module'")
	if e.Name != "Error" || !strings.Contains(e.Value, "no-such-module") {
		t.Errorf("a missing module: %v", e)
	}
}

func TestNodeTypeScript(t *testing.T) {
	n := startNode(t, NodeConfig{TypeScript: true})
	values(t, n, []valueCase{
		{"function add(a: number, b: number): number { return a + b }; add(1, 2)", "3"},
		{"interface Point { x: number; y: number }\ntype Name = string\nconst p: Point = { x: 1, y: 2 }\nconst who: Name = 'me'", ""},
		{"[p.x + p.y, who]", "[ 3, 'me' ]"},
		{"const wrong: number = 'not a number' as any as number; wrong", "'not a number'"},
		{"let typed: string = 1 as unknown as string; typed", "1"},
		{"enum Color { Red, Green }\nColor.Green", "1"},
		{"class Box<T> { constructor(private v: T) {} get(): T { return this.v } }\nnew Box<number>(5).get()", "5"},
		{"const p = await Promise.resolve<number>(7); p", "7"},
		{"import { basename } from 'path'; import type { Stats } from 'fs'; basename('/x/y.ts')", "'y.ts'"},
		{"const x: number = 1", ""},
		{"const x: string = 'redeclared'; x", "'redeclared'"},
	})
	e := fails(t, n, "const broken: number = ;")
	if e.Name != "SyntaxError" {
		t.Errorf("a TypeScript syntax error: %v", e)
	}
}

func TestNodeErrors(t *testing.T) {
	n := startNode(t, NodeConfig{})
	for _, tc := range []struct{ code, name, value string }{
		{"throw new Error('boom')", "Error", "boom"},
		{"null.x", "TypeError", ""},
		{"notDefined + 1", "ReferenceError", "notDefined is not defined"},
		{"await Promise.reject(new RangeError('far'))", "RangeError", "far"},
		{"Promise.reject(new TypeError('rejected'))", "TypeError", "rejected"},
		{"throw 'a string'", "Error", "a string"},
		{"throw {code: 42}", "Error", "{ code: 42 }"},
		{"class MyError extends Error { name = 'MyError' }; throw new MyError('mine')", "MyError", "mine"},
		{"const x = ;", "SyntaxError", ""},
		{"let a = 1 +* 2", "SyntaxError", ""},
	} {
		e := fails(t, n, tc.code)
		if e.Name != tc.name || (tc.value != "" && e.Value != tc.value) {
			t.Errorf("%q: got %s: %q, want %s: %q", tc.code, e.Name, e.Value, tc.name, tc.value)
		}
		if len(e.Traceback) == 0 {
			t.Errorf("%q: no traceback", tc.code)
		}
	}
	e := fails(t, n, "function deep() { throw new Error('in deep') }\ndeep()")
	tb := strings.Join(e.Traceback, "\n")
	if !strings.Contains(tb, "at deep (<cell ") || strings.Contains(tb, "driver.js") || strings.Contains(tb, "node:vm") {
		t.Errorf("traceback:\n%s", tb)
	}

	// Errors after a cell do not end the context.
	ok(t, n, "setTimeout(() => { throw new Error('from a callback') }, 0); Promise.reject(new Error('unhandled')); 1")
	c := ok(t, n, "await new Promise(r => setTimeout(r, 100)); 'alive'")
	if got := c.result(t); got != "'alive'" {
		t.Errorf("after errors in callbacks: %q", got)
	}
	// An error in a callback while a cell runs is on that cell's stderr.
	c = ok(t, n, "setTimeout(() => { throw new Error('during') }, 0); await new Promise(r => setTimeout(r, 200)); 2")
	if got := c.stream("stderr"); !strings.Contains(got, "during") {
		t.Errorf("stderr of the cell: %q", got)
	}
	if got := value(t, n, "1 + 1"); got != "2" {
		t.Errorf("after errors: %q", got)
	}
}

// runUntilOutput starts code and returns once it wrote to stdout, with the
// channel its execution's end comes on: nil when it ended with an error
// named Interrupted, or any error when anyError.
func runUntilOutput(t *testing.T, n *Node, ctx context.Context, code string, anyError bool) <-chan error {
	t.Helper()
	started := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		var e *kernel.Error
		reply, err := n.Execute(ctx, code, kernel.ExecuteOptions{}, func(o kernel.Output) {
			switch o := o.(type) {
			case *kernel.Stream:
				once.Do(func() { close(started) })
			case *kernel.Error:
				e = o
			}
		})
		switch {
		case err != nil:
		case e == nil || reply.Status != "error":
			err = fmt.Errorf("status %s, error %v", reply.Status, e)
		case e.Name != "Interrupted" && !anyError:
			err = fmt.Errorf("the error is %s, not Interrupted", e)
		}
		done <- err
	}()
	select {
	case <-started:
	case err := <-done:
		select {
		case <-started:
		default:
			t.Fatalf("%s ended before its output: %v", code, err)
		}
		t.Fatalf("%s ended before it was interrupted: %v", code, err)
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s: no output", code)
	}
	return done
}

func TestNodeInterrupt(t *testing.T) {
	n := startNode(t, NodeConfig{})
	ok(t, n, "const kept = 'state'")
	for _, tc := range []struct {
		code     string
		anyError bool
	}{
		{"console.log('looping'); while (true) {}", false},
		{"console.log('waiting'); await new Promise(() => {})", false},
	} {
		code := tc.code
		done := runUntilOutput(t, n, context.Background(), code, tc.anyError)
		if err := n.Interrupt(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Errorf("%s: %v", code, err)
		}
		if got := value(t, n, "kept"); got != "'state'" {
			t.Errorf("after interrupting %q: %q", code, got)
		}
	}

	// A ctx that ends interrupts too.
	ctx, cancel := context.WithCancel(context.Background())
	done := runUntilOutput(t, n, ctx, "console.log('again'); while (true) {}", false)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Execute with a cancelled ctx: %v", err)
	}
	if got := value(t, n, "kept + '!'"); got != "'state!'" {
		t.Errorf("after a cancelled execution: %q", got)
	}
	// A cell waiting for a process: the cell may see its child die of
	// SIGINT before node's watchdog sees SIGINT itself (then execSync's
	// error ends it), and a SIGINT node takes late must not reach the
	// cells after it: neither a quick one right after nor a longer one.
	for i := 0; i < 3; i++ {
		waiting := runUntilOutput(t, n, context.Background(), "console.log('sleeping'); require('child_process').execSync('sleep 600')", true)
		if err := n.Interrupt(); err != nil {
			t.Fatal(err)
		}
		if err := <-waiting; err != nil {
			t.Errorf("a cell waiting for a process: %v", err)
		}
		if got := value(t, n, "kept"); got != "'state'" {
			t.Errorf("after interrupting a cell waiting for a process: %q", got)
		}
		if got := value(t, n, "let s = 0; for (let i = 0; i < 2e7; i++) s += i % 3; s"); got != "19999999" {
			t.Errorf("a loop after an interrupt: %q", got)
		}
		if got := value(t, n, "await new Promise(r => setTimeout(r, 50)); kept"); got != "'state'" {
			t.Errorf("a cell that awaits after an interrupt: %q", got)
		}
		if got := value(t, n, "require('child_process').execSync('echo child').toString().trim()"); got != "'child'" {
			t.Errorf("a process after an interrupt: %q", got)
		}
	}

	// Interrupting with nothing running changes nothing.
	if err := n.Interrupt(); err != nil {
		t.Fatal(err)
	}
	if got := value(t, n, "kept"); got != "'state'" {
		t.Errorf("after an idle interrupt: %q", got)
	}

	// A busy loop after an await cannot be interrupted: node is killed.
	done = runUntilOutput(t, n, context.Background(), "await null; console.log('looping'); while (true) {}", false)
	if err := n.Interrupt(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, kernel.ErrDied) {
		t.Errorf("an interrupted busy loop after an await: %v", err)
	}
}

func TestNodeDeath(t *testing.T) {
	n := startNode(t, NodeConfig{})
	ok(t, n, "const gone = 1")
	ok(t, n, "2")
	_, err := execute(t, n, "console.log('bye'); process.exit(1)", kernel.ExecuteOptions{})
	if !errors.Is(err, kernel.ErrDied) {
		t.Fatalf("process.exit: %v", err)
	}
	if _, err := execute(t, n, "1", kernel.ExecuteOptions{}); !errors.Is(err, kernel.ErrDied) {
		t.Errorf("after death: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := n.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	c := ok(t, n, "typeof gone")
	if got := c.result(t); got != "'undefined'" {
		t.Errorf("state after restart: %q", got)
	}
	if c.reply.ExecutionCount != 1 {
		t.Errorf("count after restart: %d", c.reply.ExecutionCount)
	}
	// Restart while a cell runs: the execution fails, the state is gone.
	ok(t, n, "const before = 1")
	done := make(chan error, 1)
	go func() {
		_, err := n.Execute(context.Background(), "console.log('x'); while (true) {}", kernel.ExecuteOptions{}, nil)
		done <- err
	}()
	if !testutil.Eventually(time.Minute, func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.cur.sink != nil
	}) {
		t.Fatal("the execution did not start")
	}
	if err := n.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, kernel.ErrDied) {
		t.Errorf("an execution during Restart: %v", err)
	}
	if got := value(t, n, "typeof before"); got != "'undefined'" {
		t.Errorf("state after a restart: %q", got)
	}

	// Killed from outside (as by the OOM killer).
	pid := n.Pid()
	go func() {
		_, err := n.Execute(context.Background(), "await new Promise(() => {})", kernel.ExecuteOptions{}, nil)
		done <- err
	}()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, kernel.ErrDied) {
		t.Errorf("killed: %v", err)
	}
}

func TestNodeClose(t *testing.T) {
	n := startNode(t, NodeConfig{})
	c := ok(t, n, "const { spawn } = require('child_process'); const child = spawn('sleep', ['600'], { stdio: 'ignore' }); child.pid")
	child, err := strconv.Atoi(c.result(t))
	if err != nil {
		t.Fatal(err)
	}
	pid := n.Pid()
	n.mu.Lock()
	dir := n.cur.dir
	n.mu.Unlock()
	if _, err := os.Stat(filepath.Join(dir, "driver.js")); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []int{pid, child} {
		// Gone, or a zombie its new parent has yet to reap.
		gone := func() bool {
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
			return err != nil || strings.Contains(string(stat), ") Z ")
		}
		if !testutil.Eventually(time.Minute, gone) {
			t.Errorf("process %d is left", p)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the driver's directory is left: %v", err)
	}
	if _, err := execute(t, n, "1", kernel.ExecuteOptions{}); !errors.Is(err, kernel.ErrClosed) {
		t.Errorf("Execute after Close: %v", err)
	}
}

func TestNodeProtocol(t *testing.T) {
	log := &testutil.Buffer{}
	n := startNode(t, NodeConfig{Log: log, MaxMessageBytes: 4096})
	// What the cell prints, and what processes it starts write anywhere,
	// is output, never protocol.
	c := ok(t, n, `console.log('{"id":1,"t":"done","status":"ok"}')
const { execSync } = require('child_process')
execSync('echo {\"id\":1,\"t\":\"done\"} >&4; echo to-fd-3 >&3; echo child-stdout', { stdio: 'inherit' })
'after'`)
	if got := c.result(t); got != "'after'" {
		t.Errorf("result %q", got)
	}
	if got, want := c.stream("stdout"), "{\"id\":1,\"t\":\"done\",\"status\":\"ok\"}\n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	if !testutil.Eventually(time.Minute, func() bool { return strings.Contains(log.String(), "child-stdout") }) {
		t.Errorf("no child stdout in the log: %q", log.String())
	}

	// A cell larger than a pipe's buffer.
	big := strings.Repeat("a", 1<<20)
	if got := value(t, n, "'"+big+"'.length"); got != strconv.Itoa(len(big)) {
		t.Errorf("a cell of 1 MiB: %q", got)
	}

	// An output over the limit is dropped, and the cell goes on.
	c = ok(t, n, "console.log('x'.repeat(10000)); console.log('small'); 'done'")
	var dropped []*kernel.Dropped
	for _, o := range c.outs {
		if d, ok := o.(*kernel.Dropped); ok {
			dropped = append(dropped, d)
		}
	}
	if len(dropped) != 1 || dropped[0].MsgType != "stream" || dropped[0].Size < 10000 {
		t.Errorf("dropped: %+v", dropped)
	}
	if got := c.stream("stdout"); got != "small\n" {
		t.Errorf("stdout %q", got)
	}
	if got := c.result(t); got != "'done'" {
		t.Errorf("result %q", got)
	}
}

func TestNodeWithoutTypeScript(t *testing.T) {
	n := startNode(t, NodeConfig{TypeScriptModule: t.TempDir()})
	values(t, n, []valueCase{
		{"const a = 40; a + 2", "42"},
		{"a", "40"},
		{"console.log('out'); Promise.resolve('p')", "'p'"},
	})
	e := fails(t, n, "import fs from 'fs'")
	if e.Name != "SyntaxError" || !strings.Contains(e.Value, "node-typescript") {
		t.Errorf("an import without TypeScript: %v", e)
	}
	e = fails(t, n, "throw new TypeError('plain')")
	if e.Name != "TypeError" || e.Value != "plain" {
		t.Errorf("an error without TypeScript: %v", e)
	}

	ts := startNode(t, NodeConfig{TypeScript: true, TypeScriptModule: t.TempDir()})
	e = fails(t, ts, "const n: number = 1")
	if !strings.Contains(e.Value, "node-typescript") {
		t.Errorf("TypeScript without TypeScript: %v", e)
	}
}
