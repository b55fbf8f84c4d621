package main

import (
	"fmt"
	"os"
)

// cmdMCPWrap is `hutch mcp wrap [flags] -- SERVER_COMMAND…`, not built
// yet.
func cmdMCPWrap(_ []string, _, _, stderr *os.File) int {
	fmt.Fprintln(stderr, "hutch: mcp wrap: not built yet")
	return 125
}
