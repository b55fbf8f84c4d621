package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParseTemplates: templates come from a YAML or JSON file and from
// --template flags; a name given twice, a malformed flag or a reference
// that is not an image's is refused, naming it.
func TestParseTemplates(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "templates.yaml")
	if err := os.WriteFile(file, []byte("python: python:3.12-slim\nnode: ghcr.io/o/node:22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := parseTemplates(file, []string{"base=hutch.test/base:1"})
	if err != nil || len(got) != 3 || got["python"] != "python:3.12-slim" || got["node"] != "ghcr.io/o/node:22" || got["base"] != "hutch.test/base:1" {
		t.Errorf("templates %v, %v", got, err)
	}
	jsonFile := filepath.Join(dir, "templates.json")
	if err := os.WriteFile(jsonFile, []byte(`{"go": "golang:1.26"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := parseTemplates(jsonFile, nil); err != nil || got["go"] != "golang:1.26" {
		t.Errorf("JSON: %v, %v", got, err)
	}
	for _, c := range []struct {
		file  string
		flags []string
		want  string
	}{
		{file, []string{"python=other:1"}, "python: given twice"},
		{"", []string{"nameonly"}, `"nameonly": want NAME=REF`},
		{"", []string{"a=UPPER/case"}, "--template a:"},
		{filepath.Join(dir, "missing.yaml"), nil, "missing.yaml"},
	} {
		if _, err := parseTemplates(c.file, c.flags); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseTemplates(%q, %q) = %v, want an error naming %q", c.file, c.flags, err, c.want)
		}
	}
}
