// Command hutch-agent is PID 1 of the sandboxes of hutch serve and hutch
// mcp: hutch's agent alone (with ssh's proxy-connect helper and the port
// forwards' port-connect), without the rest of hutch. It is also the init
// of the microVM tier's guests (microvm-init).
// A sandbox's PID 1 stays for the sandbox's life, and this binary's runtime
// and package initialization cost half the memory of the whole hutch
// binary's; hutch serve uses it when it is installed next to hutch.
package main

import (
	"fmt"
	"os"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/microvm/guest"
	"github.com/hutch-sandbox/hutch/internal/portconnect"
	"github.com/hutch-sandbox/hutch/internal/proxyconnect"
)

func main() {
	args := os.Args[1:]
	switch {
	case len(args) > 0 && args[0] == "agent":
		os.Exit(agent.Main(args[1:], os.Stderr))
	case len(args) > 0 && args[0] == "sudo":
		os.Exit(agent.SudoMain(args[1:], os.Stderr))
	case len(args) > 0 && args[0] == "proxy-connect":
		os.Exit(proxyconnect.Main(args[1:], os.Stdin, os.Stdout, os.Stderr))
	case len(args) > 0 && args[0] == portconnect.Command:
		os.Exit(portconnect.Main(args[1:], os.Stdin, os.Stdout, os.Stderr))
	case len(args) > 0 && args[0] == guest.InitCommand:
		os.Exit(guest.InitMain(args[1:], os.Stderr))
	}
	fmt.Fprintln(os.Stderr, "hutch-agent: usage: hutch-agent agent | sudo CMD | proxy-connect HOST PORT | port-connect PORT (inside a sandbox of hutch serve or hutch mcp)")
	os.Exit(2)
}
