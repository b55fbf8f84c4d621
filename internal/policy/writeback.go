package policy

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// AddApproved appends a command line to approvals.approved in a policy
// file: a person's "allow always" at a prompt.
func AddApproved(file, command string) error {
	return appendToList(file, []string{"approvals", "approved"}, command)
}

// AddAllowedDomain appends a destination ("host" or "host:port") to
// network.allowed_domains in a policy file: "allow always" for a host.
func AddAllowedDomain(file, dest string) error {
	return appendToList(file, []string{"network", "allowed_domains"}, dest)
}

// appendToList appends value to the list at path in a YAML policy file,
// creating the sections it needs, keeping the rest of the file (comments
// included, as yaml.v3 writes them back). The file is checked to load
// before and after, and replaced atomically.
func appendToList(file string, path []string, value string) error {
	if strings.EqualFold(filepath.Ext(file), ".json") {
		return fmt.Errorf("%s: hutch writes answers back to YAML policy files only", file)
	}
	if _, err := Load(file); err != nil {
		return err
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if doc.Kind == 0 {
		doc = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode}}}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return fmt.Errorf("%s: not a mapping of sections", file)
	}
	n := doc.Content[0]
	for i, key := range path {
		kind := yaml.MappingNode
		if i == len(path)-1 {
			kind = yaml.SequenceNode
		}
		n, err = child(n, key, kind)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", file, strings.Join(path[:i+1], "."), err)
		}
	}
	for _, c := range n.Content {
		if c.Kind == yaml.ScalarNode && c.Value == value {
			return nil
		}
	}
	n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: value})
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	info, err := os.Stat(file)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(out.Bytes()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(info.Mode().Perm()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if _, err := Load(tmp.Name()); err != nil {
		return fmt.Errorf("%s: the file would not load after the change: %w", file, err)
	}
	return os.Rename(tmp.Name(), file)
}

// child finds key in mapping m, adding it (empty, of kind) when absent; a
// null value becomes an empty node of kind.
func child(m *yaml.Node, key string, kind yaml.Kind) (*yaml.Node, error) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value != key {
			continue
		}
		v := m.Content[i+1]
		if v.Kind == yaml.AliasNode {
			return nil, errors.New("an alias; write the value out to let hutch add to it")
		}
		if v.Kind == yaml.ScalarNode && (v.Tag == "!!null" || v.Value == "" || v.Value == "~" || v.Value == "null") {
			*v = yaml.Node{Kind: kind}
		}
		if v.Kind != kind {
			return nil, fmt.Errorf("expected a %s", kindName(kind))
		}
		return v, nil
	}
	v := &yaml.Node{Kind: kind}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, v)
	return v, nil
}

func kindName(k yaml.Kind) string {
	if k == yaml.SequenceNode {
		return "list"
	}
	return "mapping"
}
