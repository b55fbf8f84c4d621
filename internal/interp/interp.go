// Package interp holds the pieces of hutch's code interpreter that run in
// a sandbox next to its kernels. For now: the startup file every Python
// kernel runs (Startup), which gives results the representations E2B's
// Code Interpreter SDK reads besides text and images — "e2b/chart" (a
// matplotlib figure as chart data: line, scatter, bar, pie,
// box_and_whisker, superchart, unknown), "e2b/data" (a pandas DataFrame
// as its columns) and "application/json" (a plain list or dict).
//
// The chart data is read from the figure's artists after it is drawn; a
// box plot's statistics are those matplotlib computes for it
// (cbook.boxplot_stats, kept by a wrapper of Axes.boxplot), not
// recovered from its geometry. Fields without a value are present as
// null, as the SDK's users expect.
package interp

import _ "embed"

// Startup is the Python file a kernel runs at start
// (--IPKernelApp.exec_files), written to a file the kernel can read.
//
//go:embed startup.py
var Startup []byte
