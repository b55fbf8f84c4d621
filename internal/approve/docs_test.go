package approve

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/approvals.md's lists of shipped rules")

// docLists are the lists of shipped rules docs/approvals.md holds, each
// between the markers "<!-- NAME: begin -->" and "<!-- NAME: end -->".
func docLists() map[string][]Rule {
	readOnly, _, _ := PresetRules(PresetReadOnly)
	workspace, _, _ := PresetRules(PresetWorkspaceWrite)
	return map[string][]Rule{
		"default rules":          DefaultRules(),
		"preset read-only":       readOnly,
		"preset workspace-write": workspace,
	}
}

// docList writes rules as an approvals.commands list, one rule a line.
func docList(rules []Rule) string {
	var b strings.Builder
	b.WriteString("```yaml\n")
	for _, r := range rules {
		b.WriteString("- " + r.String() + "\n")
	}
	b.WriteString("```\n")
	return b.String()
}

// TestDocsLists keeps docs/approvals.md's lists of the default rules and
// the presets' rules as they are (go test ./internal/approve -run
// DocsLists -update rewrites them).
func TestDocsLists(t *testing.T) {
	const path = "../../docs/approvals.md"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	for name, rules := range docLists() {
		begin, end := "<!-- "+name+": begin -->\n", "<!-- "+name+": end -->"
		i, j := strings.Index(doc, begin), strings.Index(doc, end)
		if i < 0 || j < i {
			t.Errorf("docs/approvals.md lacks the markers %q and %q", begin, end)
			continue
		}
		want := docList(rules)
		if doc[i+len(begin):j] == want {
			continue
		}
		if !*update {
			t.Errorf("docs/approvals.md's list %q differs from the rules hutch ships: run go test ./internal/approve -run DocsLists -update", name)
			continue
		}
		doc = doc[:i+len(begin)] + want + doc[j:]
	}
	if *update {
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
