// Package interp is hutch's code interpreter, which runs in a sandbox
// next to its kernels: the Server (E2B's Code Interpreter API: contexts,
// executions streamed as lines; `code-interpreter`, Main), the wire E2B's
// SDKs speak (wire.go), the Client the daemon reaches a sandbox's server
// with, the Engine a context runs on — a Jupyter kernel found by its
// kernelspec (package kernel), or hutch's own engine for JavaScript and
// TypeScript (Node) — and the startup file every Python kernel runs
// (Startup).
//
// # Startup
//
// Startup gives results the representations E2B's Code Interpreter SDK
// reads besides text and images — "e2b/chart" (a matplotlib figure as
// chart data: line, scatter, bar, pie, box_and_whisker, superchart,
// unknown), "e2b/data" (a pandas DataFrame as its columns) and
// "application/json" (a plain list or dict).
//
// The chart data is read from the figure's artists after it is drawn; a
// box plot's statistics are those matplotlib computes for it
// (cbook.boxplot_stats, kept by a wrapper of Axes.boxplot), not
// recovered from its geometry. Fields without a value are present as
// null, as the SDK's users expect.
//
// # Node
//
// A JavaScript or TypeScript context is a node process (Node 18 or later)
// running hutch's driver (node/driver.js, written to a private 0700
// directory at start), in its own process group. The protocol is JSON
// lines on two pipes of their own, fd 3 (commands: execute, interrupt)
// and fd 4 (events: stream, result, error, done), which the driver reopens
// close-on-exec so that no process a cell starts holds them; what a cell
// prints goes through the driver (process.stdout and process.stderr are
// replaced), and what reaches node's real stdout and stderr (a child
// process with stdio "inherit") goes to NodeConfig.Log. A line from node
// over the message bound is not decoded: it becomes a *kernel.Dropped; a
// long print is sent in pieces of 1 Mi characters.
//
// A cell is parsed with TypeScript (Debian's node-typescript; a
// TypeScript cell is first stripped of its types by ts.transpileModule,
// never checked) and rewritten as node's REPL does for await: top-level
// declarations (const, let, var, class, destructuring) become assignments
// to global variables, so a later cell may declare the same name again;
// imports become require calls resolved from the context's directory
// (bindings are copies, not live), and import() resolves from there too
// (the way to load a file that is an ES module); a cell with top-level await runs as an
// async function. The cell runs in node's own global context
// (vm.Script.runInThisContext); its value is that of its last expression
// statement, awaited when a promise, shown by util.inspect. A parse error
// is a SyntaxError of the cell. Without TypeScript, plain JavaScript still
// runs unchanged (without redeclaration) and imports and top-level await
// fail with an error naming node-typescript.
//
// Output is attributed to the cell whose code made it
// (AsyncLocalStorage): a timer a cell left behind prints to the log, never
// into a later cell. An exception thrown by a callback, or a rejection
// nobody handled, is reported on the stderr of the cell under way (else
// the log) and never ends node.
//
// An interrupt ends the execution with an error named "Interrupted"
// (a cell that awaits is abandoned; one that runs synchronously is broken
// by SIGINT with vm's breakOnSigint), and the context keeps its state:
// an interrupt is not a restart. It reaches only the execution it was
// asked for: the command names it, no SIGINT is sent once its end was
// read, node's SIGINT watchdog runs for the driver's whole life (started
// and stopped around each cell, node's own passes a SIGINT that came as
// one cell ended on to a later one), and a cell that follows an interrupt
// starts once node has taken every SIGINT. SIGINT is the engine's: a
// cell's process.on('SIGINT') adds nothing. Node cannot break a busy loop that runs
// after an await: such a cell is ended by killing node (kernel.ErrDied). When node exits, every Execute fails with
// kernel.ErrDied until Restart.
package interp

import _ "embed"

// Startup is the Python file a kernel runs at start
// (--IPKernelApp.exec_files), written to a file the kernel can read.
//
//go:embed startup.py
var Startup []byte
