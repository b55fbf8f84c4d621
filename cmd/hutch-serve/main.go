// Command hutch-serve is hutch's daemon, `hutch serve`: long-lived
// sandboxes behind an HTTP API, with SQLite state, an audit log and E2B's
// front ends. It also makes API tokens (`hutch token create`) and, when
// hutch-agent is not installed next to it, is its sandboxes' PID 1.
//
// It also keeps the images sandboxes start from (`hutch image`), which
// links a registry client, and serves agents over MCP (`hutch mcp`, `hutch
// mcp wrap`), which links MCP's SDK.
//
// Users type `hutch serve`, `hutch token create`, `hutch image` and `hutch
// mcp`: hutch runs this binary, installed next to it, for those. It is a
// binary of its own so that `hutch run` and the client commands do not
// pay at every start for the packages only these use (see
// docs/ARCHITECTURE.md, "one binary for the daemon, one for everything
// else").
package main

import (
	"fmt"
	"os"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/gvisor"
	"github.com/hutch-sandbox/hutch/internal/interp"
	"github.com/hutch-sandbox/hutch/internal/microvm"
	"github.com/hutch-sandbox/hutch/internal/microvm/guest"
	"github.com/hutch-sandbox/hutch/internal/portconnect"
	"github.com/hutch-sandbox/hutch/internal/proxyconnect"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `hutch-serve is hutch's daemon; run it as "hutch serve".

Usage:
  hutch serve [flags]                      run the daemon (hutch-serve serve [flags])
  hutch token create --tenant NAME [--e2b] make an API token for a tenant
  hutch image COMMAND                      the images sandboxes start from (hutch image -h)
  hutch snapshot push SID REF              push a daemon's snapshot to a registry, from here
  hutch mcp [flags]                        serve hutch's tools over MCP on stdio (hutch mcp -h)
  hutch mcp wrap [flags] -- SERVER...      run an MCP server in a sandbox (hutch mcp wrap -h)
  hutch-serve version                      print its version

Run "hutch serve -h" and "hutch token create -h" for the flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin, stdout, stderr *os.File) int {
	if len(args) == 0 {
		return cmdServe(nil, stderr)
	}
	switch args[0] {
	case "serve":
		return cmdServe(args[1:], stderr)
	case "token":
		return cmdToken(args[1:], stdout, stderr)
	case "image":
		return cmdImage(args[1:], stdout, stderr)
	case "snapshot":
		return cmdSnapshot(args[1:], stdout, stderr)
	case "mcp":
		return cmdMCP(args[1:], stdin, stdout, stderr)
	case gvisor.InitCommand:
		// The first process of a gVisor sandbox with a proxy that hutch
		// mcp wrap runs.
		return gvisor.InitMain(args[1:], stderr)
	case microvm.ReaperCommand:
		// PID 1 of the PID namespace of one of a microVM's host
		// processes, which ends it when the daemon ends.
		return microvm.ReaperMain(args[1:], stderr)
	case "agent":
		// PID 1 of a sandbox when hutch-agent is not installed.
		return agent.Main(args[1:], stderr)
	case guest.InitCommand:
		// The init of a microVM's guest when hutch-agent is not installed.
		return guest.InitMain(args[1:], stderr)
	case "sudo":
		// sudo inside a sandbox whose agent this is (hutch's base image).
		return agent.SudoMain(args[1:], stderr)
	case "proxy-connect":
		return proxyconnect.Main(args[1:], stdin, stdout, stderr)
	case portconnect.Command:
		// A port forward's end inside a sandbox whose agent this is.
		return portconnect.Main(args[1:], stdin, stdout, stderr)
	case interp.Command:
		// The code interpreter of a sandbox whose agent this is.
		return interp.Main(args[1:], stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "hutch-serve", version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	// hutch-serve FLAGS is hutch serve FLAGS.
	return cmdServe(args, stderr)
}
