package approve

import (
	"strings"
)

// ExportRisky moves the variables of env ("NAME=value") that change what
// a command name runs or what a shell does at start (PATH, LD_PRELOAD,
// BASH_ENV, …) into line, a shell command line, as `export NAME=value`
// statements before it: it returns the new line and the rest of env. Run
// with /bin/sh -c, the new line does what line did with env; decided by
// the rules, its assignments are seen as they would be in the line (the
// default is to ask), and a person asked sees them. Variables that change
// nothing of that kind stay in env.
func ExportRisky(line string, env []string) (string, []string) {
	var exports []string
	rest := make([]string, 0, len(env))
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		if !riskyVar(name) {
			rest = append(rest, kv)
			continue
		}
		exports = append(exports, "export "+name+"="+shellQuote(value)+"\n")
	}
	if len(exports) == 0 {
		return line, env
	}
	return strings.Join(exports, "") + line, rest
}
