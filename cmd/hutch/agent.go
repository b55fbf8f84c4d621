package main

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"

	"github.com/hutch-sandbox/hutch/internal/agent"
)

// cmdAgent is PID 1 of a long-lived sandbox: hutch's agent, serving the
// daemon on descriptor 3 (see sandbox.Start). It is not for people: run
// anywhere else it finds no agent connection and says so.
func cmdAgent(args []string, stderr io.Writer) int {
	if len(args) != 0 {
		fmt.Fprintln(stderr, "hutch: agent takes no arguments")
		return 2
	}
	f := os.NewFile(3, "agent-connection")
	conn, err := net.FileConn(f)
	f.Close()
	if err != nil {
		fmt.Fprintf(stderr, "hutch: agent: no agent connection on descriptor 3 (the agent runs only inside a sandbox that hutch serve started): %v\n", err)
		return 2
	}
	dir, _ := os.Getwd()
	err = agent.Serve(conn, agent.ServeOptions{
		PID1:       os.Getpid() == 1,
		Log:        slog.New(slog.DiscardHandler),
		DefaultDir: dir,
		DefaultEnv: os.Environ(),
	})
	if err != nil {
		return 1
	}
	return 0
}
