package approve

import (
	"slices"
	"strings"
)

// EnvLine is the command line to decide for line run with the variables
// env ("NAME=value") set: line itself, or, when env sets a variable that
// changes what a command name runs or what a shell does at start (PATH,
// LD_PRELOAD, BASH_ENV, …), those assignments as a statement of their own
// before it, so that the rules see them as they would in the line (the
// default is to ask) and a person asked sees them.
func EnvLine(line string, env []string) string {
	var risky []string
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		if riskyVar(name) {
			risky = append(risky, name+"="+shellQuote(value))
		}
	}
	if len(risky) == 0 {
		return line
	}
	slices.Sort(risky)
	return strings.Join(risky, " ") + "\n" + line
}
