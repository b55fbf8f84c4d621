package policy

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// policyFields lists the field names of each section of a policy file, as spelled
// in the json/yaml tags of Spec ("" is the top level; nil for no section).
// A test keeps it in step with the structs. (A switch, not a map: a map
// literal is built at package initialization, on every start of hutch.)
func policyFields(section string) []string {
	switch section {
	case "":
		return []string{"root", "tier", "filesystem", "network", "secrets", "env", "resources", "approvals", "best_effort"}
	case "secrets":
		return []string{"name", "hosts", "from", "placeholder_prefix", "in_query", "in_body", "allow_plain_http"}
	case "filesystem":
		return []string{"workspace", "workspace_at", "allow_write", "deny_read", "allow_read", "deny_write", "no_default_denies", "home", "workspace_mode"}
	case "network":
		return []string{"mode", "allowed_domains", "denied_domains", "allowed_cidrs", "allow_private", "private_names", "hosts", "allow_host", "headers", "on_unknown"}
	case "network.headers":
		return []string{"host", "set"}
	case "env":
		return []string{"pass", "set"}
	case "approvals":
		return []string{"default", "preset", "no_default_rules", "commands", "approved", "files"}
	case "resources":
		return []string{"memory", "cpus", "pids", "timeout", "tmp_size", "disk"}
	}
	return nil
}

// NetworkModes lists the values network.mode accepts.
var NetworkModes = []string{"none", "proxy", "host"}

// Load reads a policy file, YAML or JSON, and decodes it into a Spec. Every
// problem in the file is reported as an *Error with the file's path, line
// and column. An empty file gives the zero Spec. Load does not apply
// defaults: call Normalize, then Validate.
func Load(path string) (Spec, error) {
	data, err := readFile(path)
	if err != nil {
		return Spec{}, err
	}
	return Parse(path, data)
}

// Parse decodes a policy, YAML or JSON, read from the file called name
// (used in error messages, and a ".json" extension selects JSON).
func Parse(name string, data []byte) (Spec, error) {
	root, err := parseDocument(name, data)
	if err != nil {
		return Spec{}, err
	}
	d := &decoder{file: name}
	return d.spec(root)
}

// suggestIn returns a suggester for unknown fields of section. At the top
// level it also recognizes a field of another section given out of place.
func suggestIn(section string) func(string) string {
	return func(name string) string {
		if s := suggestField(name, policyFields(section)); s != "" {
			return s
		}
		if section == "" {
			for _, sec := range policyFields("") {
				if s := suggestField(name, policyFields(sec)); s != "" {
					return sec + "." + s
				}
			}
		}
		return ""
	}
}

func (d *decoder) spec(root *yaml.Node) (Spec, error) {
	var s Spec
	top, err := d.mapping(root, "", policyFields(""), suggestIn(""))
	if err != nil {
		return Spec{}, err
	}
	for _, e := range top {
		switch e.key.Value {
		case "root":
			s.Root, err = d.str(e.val, "root")
			if err == nil && s.Root != "host" && s.Root != "" {
				if cerr := checkPath(s.Root); cerr != nil {
					err = d.errorf(e.val, "root: %v", cerr)
				}
			}
		case "tier":
			s.Tier, err = d.str(e.val, "tier")
			if err == nil && s.Tier != "" {
				if cerr := CheckTier(s.Tier); cerr != nil {
					err = d.errorf(e.val, "tier: %v", cerr)
				}
			}
		case "filesystem":
			err = d.filesystem(e.val, &s.Filesystem)
		case "network":
			err = d.network(e.val, &s.Network)
		case "secrets":
			s.Secrets, err = d.secrets(e.val)
		case "env":
			err = d.env(e.val, &s.Env)
		case "resources":
			err = d.resources(e.val, &s.Resources)
		case "approvals":
			err = d.approvals(e.val, &s.Approvals)
		case "best_effort":
			s.BestEffort, err = d.boolean(e.val, "best_effort")
		}
		if err != nil {
			return Spec{}, err
		}
	}
	return s, nil
}

func (d *decoder) filesystem(n *yaml.Node, fs *Filesystem) error {
	entries, err := d.mapping(n, "filesystem", policyFields("filesystem"), suggestIn("filesystem"))
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := "filesystem." + e.key.Value
		switch e.key.Value {
		case "workspace":
			fs.Workspace, err = d.str(e.val, name)
			if err == nil && fs.Workspace != "" {
				if cerr := checkPath(fs.Workspace); cerr != nil {
					err = d.errorf(e.val, "%s: %v", name, cerr)
				}
			}
		case "workspace_at":
			fs.WorkspaceAt, err = d.str(e.val, name)
			if err == nil {
				if cerr := CheckWorkspaceAt(fs.WorkspaceAt); cerr != nil {
					err = d.errorf(e.val, "%s: %v", name, cerr)
				}
			}
		case "allow_write":
			fs.AllowWrite, err = d.list(e.val, name, "paths", checkPath)
		case "deny_read":
			fs.DenyRead, err = d.list(e.val, name, "paths", checkPath)
		case "allow_read":
			fs.AllowRead, err = d.list(e.val, name, "paths", checkPath)
		case "deny_write":
			fs.DenyWrite, err = d.list(e.val, name, "paths", checkPath)
		case "no_default_denies":
			fs.NoDefaultDenies, err = d.boolean(e.val, name)
		case "home":
			fs.Home, err = d.str(e.val, name)
			if err == nil {
				if cerr := CheckHome(fs.Home); cerr != nil {
					err = d.errorf(e.val, "%s: %v", name, cerr)
				}
			}
		case "workspace_mode":
			fs.WorkspaceMode, err = d.str(e.val, name)
			if err == nil {
				if cerr := CheckWorkspaceMode(fs.WorkspaceMode); cerr != nil {
					err = d.errorf(e.val, "%s: %v", name, cerr)
				}
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (d *decoder) network(n *yaml.Node, nw *Network) error {
	entries, err := d.mapping(n, "network", policyFields("network"), suggestIn("network"))
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := "network." + e.key.Value
		switch e.key.Value {
		case "mode":
			nw.Mode, err = d.str(e.val, name)
			if err == nil && nw.Mode != "" {
				if cerr := checkMode(nw.Mode); cerr != nil {
					err = d.errorf(e.val, "%s: %v", name, cerr)
				}
			}
		case "allowed_domains":
			nw.AllowedDomains, err = d.list(e.val, name, "domains", func(s string) error { return checkDomain(s, false) })
		case "denied_domains":
			nw.DeniedDomains, err = d.list(e.val, name, "domains", func(s string) error { return checkDomain(s, true) })
		case "allowed_cidrs":
			nw.AllowedCIDRs, err = d.list(e.val, name, "CIDRs", checkCIDRPort)
		case "allow_private":
			nw.AllowPrivate, err = d.list(e.val, name, "CIDRs", checkCIDR)
		case "private_names":
			nw.PrivateNames, err = d.list(e.val, name, "CIDRs", checkCIDR)
		case "on_unknown":
			nw.OnUnknown, err = d.checkedStr(e.val, name, CheckOnUnknown)
		case "hosts":
			nw.Hosts, err = d.list(e.val, name, "NAME:ADDRESS pins", checkHostPin)
		case "allow_host":
			var b bool
			b, err = d.boolean(e.val, name)
			nw.AllowHost = &b
		case "headers":
			nw.Headers, err = d.headers(e.val)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// CheckWorkspaceAt checks a value of filesystem.workspace_at: a clean
// absolute path of the sandbox's view, not its root, a system directory
// of the image (which the workspace would cover) or one of the sandbox's
// own filesystems.
func CheckWorkspaceAt(p string) error {
	if err := checkPath(p); err != nil {
		return err
	}
	switch {
	case !filepath.IsAbs(p) || filepath.Clean(p) != p:
		return fmt.Errorf("must be a clean absolute path in the sandbox, got %q", p)
	case systemDir(p) || p == "/tmp" || strings.HasPrefix(p, "/proc/") || strings.HasPrefix(p, "/sys/") || strings.HasPrefix(p, "/dev/"):
		return fmt.Errorf("%q would cover the image's system files or the sandbox's own filesystems", p)
	}
	return nil
}

// CheckHome checks a value of filesystem.home.
func CheckHome(mode string) error {
	if !contains(HomeModes, mode) {
		return fmt.Errorf("unknown home %q (allowed: %s)", mode, quoteList(HomeModes))
	}
	return nil
}

// CheckWorkspaceMode checks a value of filesystem.workspace_mode ("" is
// "direct").
func CheckWorkspaceMode(mode string) error {
	if mode != "" && !contains(WorkspaceModes, mode) {
		return fmt.Errorf("unknown workspace mode %q (allowed: %s)", mode, quoteList(WorkspaceModes))
	}
	return nil
}

// checkMode validates network.mode.
func checkMode(mode string) error {
	if contains(NetworkModes, mode) {
		return nil
	}
	return fmt.Errorf("unknown mode %q (allowed: %s)", mode, quoteList(NetworkModes))
}

func quoteList(list []string) string {
	quoted := make([]string, len(list))
	for i, s := range list {
		quoted[i] = strconv.Quote(s)
	}
	return strings.Join(quoted, ", ")
}

// headers decodes network.headers, a list of mappings of host and set.
func (d *decoder) headers(n *yaml.Node) ([]HeaderRule, error) {
	n = resolve(n)
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, d.errorf(n, "network.headers: expected a list of {host, set}, got %s", describe(n))
	}
	if len(n.Content) > MaxHeaderRules {
		return nil, d.errorf(n, "network.headers: %d rules, more than %d", len(n.Content), MaxHeaderRules)
	}
	fields := policyFields("network.headers")
	var out []HeaderRule
	for i, item := range n.Content {
		where := fmt.Sprintf("network.headers[%d]", i)
		item = resolve(item)
		entries, err := d.mapping(item, where, fields, func(name string) string { return suggestField(name, fields) })
		if err != nil {
			return nil, err
		}
		if entries == nil {
			return nil, d.errorf(item, "%s: expected a mapping with host and set, got %s", where, describe(item))
		}
		var hr HeaderRule
		for _, e := range entries {
			field := where + "." + e.key.Value
			switch e.key.Value {
			case "host":
				hr.Host, err = d.checkedStr(e.val, field, CheckHeaderHost)
			case "set":
				hr.Set, err = d.headerSet(e.val, field)
			}
			if err != nil {
				return nil, err
			}
		}
		switch {
		case hr.Host == "":
			return nil, d.errorf(item, "%s: host is required", where)
		case len(hr.Set) == 0:
			return nil, d.errorf(item, "%s: set is required: the headers to set", where)
		}
		out = append(out, hr)
	}
	return out, nil
}

// headerSet decodes the set of a header rule: header names to values.
func (d *decoder) headerSet(n *yaml.Node, where string) (map[string]string, error) {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		return nil, d.errorf(n, "%s: expected a mapping of Header-Name: value, got %s", where, describe(n))
	}
	names := make([]string, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		names = append(names, resolve(n.Content[i]).Value)
	}
	entries, err := d.mapping(n, where, names, func(string) string { return "" })
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(entries))
	for _, e := range entries {
		v := resolve(e.val)
		if v.Kind != yaml.ScalarNode || isNull(v) {
			return nil, d.errorf(v, "%s.%s: expected a string, got %s", where, e.key.Value, describe(v))
		}
		if err := CheckHeader(e.key.Value, v.Value); err != nil {
			return nil, d.errorf(e.key, "%s: %v", where, err)
		}
		out[e.key.Value] = v.Value
	}
	if len(out) > MaxHeadersPerRule {
		return nil, d.errorf(n, "%s: %d headers, more than %d", where, len(out), MaxHeadersPerRule)
	}
	return out, nil
}

// secrets decodes the list of secrets, each a mapping.
func (d *decoder) secrets(n *yaml.Node) ([]Secret, error) {
	n = resolve(n)
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, d.errorf(n, "secrets: expected a list of secrets, got %s", describe(n))
	}
	var out []Secret
	for i, item := range n.Content {
		where := fmt.Sprintf("secrets[%d]", i)
		item = resolve(item)
		entries, err := d.mapping(item, where, policyFields("secrets"), func(name string) string { return suggestField(name, policyFields("secrets")) })
		if err != nil {
			return nil, err
		}
		if entries == nil {
			return nil, d.errorf(item, "%s: expected a mapping with name and hosts, got %s", where, describe(item))
		}
		var sec Secret
		for _, e := range entries {
			field := where + "." + e.key.Value
			switch e.key.Value {
			case "name":
				sec.Name, err = d.checkedStr(e.val, field, func(s string) error { return checkEnvName(s, false) })
			case "hosts":
				sec.Hosts, err = d.list(e.val, field, "hosts", checkSecretHost)
			case "from":
				sec.From, err = d.checkedStr(e.val, field, checkSecretSource)
			case "placeholder_prefix":
				sec.PlaceholderPrefix, err = d.checkedStr(e.val, field, checkPlaceholderPrefix)
			case "in_query":
				sec.InQuery, err = d.boolean(e.val, field)
			case "in_body":
				sec.InBody, err = d.boolean(e.val, field)
			case "allow_plain_http":
				sec.AllowPlainHTTP, err = d.boolean(e.val, field)
			}
			if err != nil {
				return nil, err
			}
		}
		if sec.Name == "" {
			return nil, d.errorf(item, "%s: name is required", where)
		}
		if len(sec.Hosts) == 0 {
			return nil, d.errorf(item, "%s: hosts is required: the hosts the secret may be sent to", where)
		}
		out = append(out, sec)
	}
	return out, nil
}

func (d *decoder) env(n *yaml.Node, env *Env) error {
	entries, err := d.mapping(n, "env", policyFields("env"), suggestIn("env"))
	if err != nil {
		return err
	}
	for _, e := range entries {
		switch e.key.Value {
		case "pass":
			env.Pass, err = d.list(e.val, "env.pass", "variable names", func(s string) error { return checkEnvName(s, true) })
		case "set":
			env.Set, err = d.envSet(e.val)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// envSet decodes env.set, a mapping of names to values. Any scalar value is
// taken as written (FOO: 1 sets FOO to "1"); null is refused.
func (d *decoder) envSet(n *yaml.Node) (map[string]string, error) {
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, d.errorf(n, "env.set: expected a mapping of NAME: value, got %s", describe(n))
	}
	// Any name is a field here; mapping still refuses duplicates and
	// non-string keys.
	names := make([]string, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		names = append(names, resolve(n.Content[i]).Value)
	}
	entries, err := d.mapping(n, "env.set", names, func(string) string { return "" })
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(entries))
	for _, e := range entries {
		name := "env.set." + e.key.Value
		if cerr := checkEnvName(e.key.Value, false); cerr != nil {
			return nil, d.errorf(e.key, "env.set: %v", cerr)
		}
		v := e.val
		switch {
		case isNull(v):
			return nil, d.errorf(v, "%s: missing value (write \"\" for an empty string)", name)
		case v.Kind != yaml.ScalarNode:
			return nil, d.errorf(v, "%s: expected a string, got %s", name, describe(v))
		case strings.ContainsRune(v.Value, 0):
			return nil, d.errorf(v, "%s: value must not contain a NUL byte", name)
		}
		out[e.key.Value] = v.Value
	}
	return out, nil
}

func (d *decoder) resources(n *yaml.Node, r *Resources) error {
	entries, err := d.mapping(n, "resources", policyFields("resources"), suggestIn("resources"))
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := "resources." + e.key.Value
		switch e.key.Value {
		case "memory":
			r.MemoryBytes, err = d.size(e.val, name)
		case "tmp_size":
			r.TmpBytes, err = d.size(e.val, name)
		case "disk":
			r.DiskBytes, err = d.size(e.val, name)
		case "timeout":
			r.Timeout, err = d.timeout(e.val, name)
		case "cpus":
			r.CPUs, err = d.number(e.val, name)
			if err == nil && r.CPUs <= 0 && !isNull(e.val) {
				err = d.errorf(e.val, "%s: must be greater than 0, got %s", name, e.val.Value)
			}
		case "pids":
			r.Pids, err = d.integer(e.val, name)
			if err == nil && r.Pids <= 0 && !isNull(e.val) {
				err = d.errorf(e.val, "%s: must be a positive integer, got %s", name, e.val.Value)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}
