package policy

import (
	"fmt"
	"strings"
)

// DefaultsMarkdown documents the default deny lists, in the words of the
// README (which holds this text between its "defaults" markers; a test
// keeps the two the same).
func DefaultsMarkdown() string {
	var b strings.Builder
	code := func(names []string) string {
		out := make([]string, len(names))
		for i, n := range names {
			out[i] = "`" + n + "`"
		}
		return strings.Join(out, ", ")
	}
	b.WriteString("**Unreadable** in your home directory (`~/`):\n\n")
	for _, g := range homeDenyRead {
		fmt.Fprintf(&b, "- %s: %s\n", g.What, code(g.Paths))
	}
	b.WriteString("\n**Unreadable** on the host:\n\n")
	for _, g := range systemDenyRead {
		fmt.Fprintf(&b, "- %s: %s\n", g.What, code(g.Paths))
	}
	section := func(title string, how Protection, homeOnly bool) {
		fmt.Fprintf(&b, "\n%s\n\n", title)
		var whys []string
		byWhy := map[string][]string{}
		for _, n := range defaultDenyWrite {
			if n.How != how || n.HomeOnly != homeOnly {
				continue
			}
			if _, ok := byWhy[n.Why]; !ok {
				whys = append(whys, n.Why)
			}
			byWhy[n.Why] = append(byWhy[n.Why], n.Name)
		}
		for _, w := range whys {
			fmt.Fprintf(&b, "- %s: %s\n", w, code(byWhy[w]))
		}
	}
	section("**Read-only in every writable area** (the workspace, `--allow-write` paths), whether they exist or not (a placeholder holds a missing one while the sandbox runs):", Prevent, false)
	section("The same, **when the home directory is writable**:", Prevent, true)
	section("**Read-only where they exist; set aside** (renamed `NAME"+SetAsideSuffix+"`) **when the sandbox creates them**:", SetAside, false)
	section("The same, **when the home directory is writable**:", SetAside, true)
	b.WriteString("\nAnd in every git directory found at any depth of a writable area (repositories, submodules, worktrees, bare repositories): `config`, `config.worktree`, `commondir`, `hooks`, `info`, the `.git` entry itself, and the hooks directory, included files and programs their configuration names; a repository the sandbox makes whose configuration would run commands is set aside.\n")
	return b.String()
}
