package policy

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		file string // default policy.yaml
		in   string
		want string
	}{
		// Unknown and misplaced fields.
		{"typo", "", "filesystem:\n  alow_write: [/x]\n",
			`policy.yaml:2:3: unknown field "alow_write" in filesystem (did you mean "allow_write"?)`},
		{"camel case", "", "filesystem:\n    allowWrite: [/x]\n",
			`policy.yaml:2:5: unknown field "allowWrite" in filesystem (did you mean "allow_write"?)`},
		{"misplaced", "", "memory: 1g\n",
			`policy.yaml:1:1: unknown field "memory" at the top level (did you mean "resources.memory"?)`},
		{"misplaced camel", "", "allowWrite: [/x]\n",
			`policy.yaml:1:1: unknown field "allowWrite" at the top level (did you mean "filesystem.allow_write"?)`},
		{"no suggestion", "", "resources:\n  banana: 1\n",
			`policy.yaml:2:3: unknown field "banana" in resources`},
		{"duplicate", "", "root: host\nroot: /srv\n",
			`policy.yaml:2:1: duplicate field "root" at the top level (first given at line 1)`},
		{"duplicate nested", "", "env:\n  set:\n    A: 1\n    A: 2\n",
			`policy.yaml:4:5: duplicate field "A" in env.set (first given at line 3)`},
		{"merge key", "", "<<: {root: host}\n",
			`policy.yaml:1:1: merge keys (<<) are not supported`},
		{"non-string key", "", "[a]: 1\n",
			`policy.yaml:1:1: field names must be plain strings, got a list`},

		// Types.
		{"top is list", "", "- a\n- b\n",
			`policy.yaml:1:1: expected a mapping of fields at the top level, got a list`},
		{"section is string", "", "filesystem: /x\n",
			`policy.yaml:1:13: filesystem: expected a mapping, got the string "/x"`},
		{"string for list", "", "filesystem:\n  allow_write: /x\n",
			`policy.yaml:2:16: filesystem.allow_write: expected a list of paths, got the string "/x"`},
		{"number in list", "", "filesystem:\n  deny_read: [/a, 3]\n",
			`policy.yaml:2:19: filesystem.deny_read[1]: expected a string, got the number 3`},
		{"empty path", "", "filesystem:\n  deny_read: [\"\"]\n",
			`policy.yaml:2:15: filesystem.deny_read[0]: must not be empty`},
		{"root number", "", "root: 3\n",
			`policy.yaml:1:7: root: expected a string, got the number 3`},
		{"bool as yes", "", "best_effort: yes\n",
			`policy.yaml:1:14: best_effort: expected true or false, got the string "yes"`},
		{"bool as list", "", "filesystem:\n  no_default_denies: []\n",
			`policy.yaml:2:22: filesystem.no_default_denies: expected true or false, got a list`},
		{"env set list", "", "env:\n  set: [A]\n",
			`policy.yaml:2:8: env.set: expected a mapping of NAME: value, got a list`},
		{"env set null", "", "env:\n  set:\n    A:\n",
			`policy.yaml:3:7: env.set.A: missing value (write "" for an empty string)`},
		{"env set nested", "", "env:\n  set:\n    A: [1]\n",
			`policy.yaml:3:8: env.set.A: expected a string, got a list`},

		// Paths.
		{"pattern", "", "filesystem:\n  deny_read: [\"~/.ssh/id_*\"]\n",
			`policy.yaml:2:15: filesystem.deny_read[0]: "~/.ssh/id_*" is a pattern; hutch takes literal paths only`},
		{"tilde user", "", "filesystem:\n  workspace: ~bob/src\n",
			`policy.yaml:2:14: filesystem.workspace: cannot expand "~bob/src": only "~" and "~/" are expanded, not "~user"`},
		{"workspace_at relative", "", "filesystem:\n  workspace_at: src\n",
			`policy.yaml:2:17: filesystem.workspace_at: must be a clean absolute path in the sandbox, got "src"`},
		{"workspace_at over /etc", "", "filesystem:\n  workspace_at: /etc\n",
			`policy.yaml:2:17: filesystem.workspace_at: "/etc" would cover the image's system files or the sandbox's own filesystems`},
		{"root pattern", "", "root: /srv/*\n",
			`policy.yaml:1:7: root: "/srv/*" is a pattern; hutch takes literal paths only`},

		// Network.
		{"mode other", "", "network:\n  mode: wifi\n",
			`policy.yaml:2:9: network.mode: unknown mode "wifi" (allowed: "none", "proxy", "host")`},
		{"bad cidr", "", "network:\n  allowed_cidrs: [10.0.0]\n",
			`policy.yaml:2:19: network.allowed_cidrs[0]: invalid CIDR "10.0.0": want an address range like 10.0.0.0/8, optionally with :PORT (IPv6 in brackets: [fd00::/8]:443)`},
		{"cidr host bits", "", "network:\n  allowed_cidrs: [10.0.0.1/8]\n",
			`policy.yaml:2:19: network.allowed_cidrs[0]: invalid CIDR "10.0.0.1/8": 10.0.0.1/8 has bits set after the prefix (did you mean 10.0.0.0/8?)`},
		{"numeric name", "", "network:\n  allowed_domains: [\"127.1\"]\n",
			`policy.yaml:2:21: network.allowed_domains[0]: invalid domain "127.1": a numeric last label reads as an IP address; write addresses in dotted form (e.g. 127.0.0.1)`},
		{"bad cidr port", "", "network:\n  allowed_cidrs: [\"10.0.0.0/8:99999\"]\n",
			`policy.yaml:2:19: network.allowed_cidrs[0]: invalid CIDR "10.0.0.0/8:99999": port must be a number from 1 to 65535`},
		{"bad private", "", "network:\n  allow_private: [localhost]\n",
			`policy.yaml:2:19: network.allow_private[0]: invalid CIDR "localhost": want an address range like 10.0.0.0/8 or fd00::/8`},
		{"bad pin", "", "network:\n  hosts: [\"api.test=1.2.3.4\"]\n",
			`policy.yaml:2:11: network.hosts[0]: invalid host pin "api.test=1.2.3.4": want NAME:ADDRESS, e.g. api.example.com:203.0.113.7`},
		{"bad pin address", "", "network:\n  hosts: [\"api.test:one\"]\n",
			`policy.yaml:2:11: network.hosts[0]: invalid host pin "api.test:one": "one" is not an IP address`},
		{"secrets not list", "", "secrets: {name: X}\n",
			`policy.yaml:1:10: secrets: expected a list of secrets, got a mapping`},
		{"secret unknown field", "", "secrets:\n  - name: GH\n    host: [github.com]\n",
			`policy.yaml:3:5: unknown field "host" in secrets[0] (did you mean "hosts"?)`},
		{"secret without hosts", "", "secrets:\n  - name: GH\n",
			`policy.yaml:2:5: secrets[0]: hosts is required: the hosts the secret may be sent to`},
		{"secret bad name", "", "secrets:\n  - name: A=B\n    hosts: [x.test]\n",
			`policy.yaml:2:11: secrets[0].name: invalid variable name "A=B": names cannot contain "="`},
		{"secret bad source", "", "secrets:\n  - name: GH\n    hosts: [x.test]\n    from: vault:gh\n",
			`policy.yaml:4:11: secrets[0].from: invalid source "vault:gh": want env:NAME, file:PATH or request`},
		{"secret bad prefix", "", "secrets:\n  - name: GH\n    hosts: [x.test]\n    placeholder_prefix: \"a b\"\n",
			`policy.yaml:4:25: secrets[0].placeholder_prefix: placeholder prefix "a b": only printable ASCII without spaces`},
		{"secret bad host", "", "secrets:\n  - name: GH\n    hosts: [\"https://x.test\"]\n",
			`policy.yaml:3:13: secrets[0].hosts[0]: invalid domain "https://x.test": give a host name, not a URL`},
		{"allow host not bool", "", "network:\n  allow_host: nope\n",
			`policy.yaml:2:15: network.allow_host: expected true or false, got the string "nope"`},
		{"broad wildcard", "", "network:\n  allowed_domains: [\"*.com\"]\n",
			`policy.yaml:2:21: network.allowed_domains[0]: invalid domain "*.com": too broad: a wildcard needs at least two labels after "*."`},
		{"star inside", "", "network:\n  allowed_domains: [\"a*.com\"]\n",
			`policy.yaml:2:21: network.allowed_domains[0]: invalid domain "a*.com": wildcards are allowed only as a leading "*." (e.g. *.example.com)`},
		{"secret to every host", "", "secrets:\n  - name: GH\n    hosts: [\"*\"]\n",
			`policy.yaml:3:13: secrets[0].hosts[0]: "*" would send the secret anywhere; name its hosts`},
		{"url", "", "network:\n  allowed_domains: [https://x.com]\n",
			`policy.yaml:2:21: network.allowed_domains[0]: invalid domain "https://x.com": give a host name, not a URL`},
		{"bad port", "", "network:\n  denied_domains: [\"x.com:0\"]\n",
			`policy.yaml:2:20: network.denied_domains[0]: invalid domain "x.com:0": port must be a number from 1 to 65535, or * for every port`},
		{"bare ipv6", "", "network:\n  denied_domains: [\"::1\"]\n",
			`policy.yaml:2:20: network.denied_domains[0]: invalid domain "::1": write IPv6 addresses in brackets, e.g. [::1]:443`},

		// Env.
		{"pass equals", "", "env:\n  pass: [\"A=B\"]\n",
			`policy.yaml:2:10: env.pass[0]: invalid variable name "A=B": names cannot contain "="`},
		{"pass empty", "", "env:\n  pass: [\"\"]\n",
			`policy.yaml:2:10: env.pass[0]: must not be empty`},
		{"pass star", "", "env:\n  pass: [\"*\"]\n",
			`policy.yaml:2:10: env.pass[0]: "*" would pass every variable; name them, or a prefix like "MYAPP_*"`},
		{"pass inner star", "", "env:\n  pass: [\"A*B\"]\n",
			`policy.yaml:2:10: env.pass[0]: invalid variable name "A*B": "*" is allowed only at the end`},
		{"set equals", "", "env:\n  set:\n    \"A=B\": x\n",
			`policy.yaml:3:5: env.set: invalid variable name "A=B": names cannot contain "="`},

		// Resources.
		{"bad size", "", "resources:\n  memory: 12q\n",
			`policy.yaml:2:11: resources.memory: invalid size "12q" (use e.g. 512m, 2g)`},
		{"negative size", "", "resources:\n  tmp_size: -1g\n",
			`policy.yaml:2:13: resources.tmp_size: invalid size "-1g": must not be negative`},
		{"zero size", "", "resources:\n  memory: 0\n",
			`policy.yaml:2:11: resources.memory: must be positive (omit the field for the default)`},
		{"size list", "", "resources:\n  memory: [1]\n",
			`policy.yaml:2:11: resources.memory: expected a size like 512m or 2g, got a list`},
		{"cpus zero", "", "resources:\n  cpus: 0\n",
			`policy.yaml:2:9: resources.cpus: must be greater than 0, got 0`},
		{"cpus negative", "", "resources:\n  cpus: -1.5\n",
			`policy.yaml:2:9: resources.cpus: must be greater than 0, got -1.5`},
		{"cpus string", "", "resources:\n  cpus: two\n",
			`policy.yaml:2:9: resources.cpus: expected a number, got the string "two"`},
		{"cpus inf", "", "resources:\n  cpus: .inf\n",
			`policy.yaml:2:9: resources.cpus: must be a finite number, got .inf`},
		{"pids negative", "", "resources:\n  pids: -3\n",
			`policy.yaml:2:9: resources.pids: must be a positive integer, got -3`},
		{"pids float", "", "resources:\n  pids: 1.5\n",
			`policy.yaml:2:9: resources.pids: expected an integer, got the number 1.5`},
		{"timeout negative", "", "resources:\n  timeout: -5\n",
			`policy.yaml:2:12: resources.timeout: invalid timeout "-5": must not be negative`},
		{"timeout negative duration", "", "resources:\n  timeout: -1m\n",
			`policy.yaml:2:12: resources.timeout: invalid timeout "-1m": must not be negative`},
		{"timeout unit", "", "resources:\n  timeout: 5x\n",
			`policy.yaml:2:12: resources.timeout: invalid timeout "5x" (use e.g. 30s, 2m, or a number of seconds)`},
		{"timeout float", "", "resources:\n  timeout: 1.5\n",
			`policy.yaml:2:12: resources.timeout: expected a duration like 30s or 2m, got the number 1.5`},

		// YAML syntax.
		{"syntax first line", "", "a: b: c\n",
			`policy.yaml:1:1: syntax error: mapping values are not allowed in this context`},
		{"syntax tab", "", "filesystem:\n\tworkspace: x\n",
			`policy.yaml:2:2: syntax error: found character that cannot start any token (indent with spaces, not tabs)`},
		{"syntax parser", "", "root: host\nbest_effort: [true\n",
			`policy.yaml:2:1: syntax error: did not find expected ',' or ']'`},
		{"syntax block", "", "filesystem:\n  - a\n  - b\nnetwork: x\n  mode: none\n",
			`policy.yaml:5:3: syntax error: mapping values are not allowed in this context`},
		{"unknown anchor", "", "root: host\nbest_effort: *nope\n",
			`policy.yaml:2:14: unknown anchor "nope"`},
		{"two documents", "", "root: host\n---\nroot: /x\n",
			`policy.yaml:2:1: a policy file holds one YAML document, found a second one`},
		{"not utf8", "", "root: \"a\xffb\"\n",
			`policy.yaml:1:9: file is not valid UTF-8`},

		// JSON.
		{"json type", "policy.json", "{\n  \"resources\": {\"memory\": \"1q\"}\n}\n",
			`policy.json:2:27: resources.memory: invalid size "1q" (use e.g. 512m, 2g)`},
		{"json duplicate", "policy.json", "{\n  \"root\": \"host\",\n  \"root\": \"/x\"\n}\n",
			`policy.json:3:3: duplicate field "root" at the top level (first given at line 2)`},
		{"json trailing comma", "policy.json", "{\n  \"root\": \"host\",\n}\n",
			`policy.json:3:1: syntax error: invalid character '}' looking for beginning of object key string`},
		{"json missing colon", "policy.json", "{\"root\" \"host\"}",
			`policy.json:1:9: syntax error: invalid character '"' after object key`},
		{"json truncated", "policy.json", "{\n  \"root\": \"host\"",
			`policy.json:2:17: syntax error: unexpected end of file`},
		{"json trailing data", "policy.json", "{} {}",
			`policy.json:1:4: syntax error: unexpected data after the top-level value`},
		{"json list", "policy.json", "[1]",
			`policy.json:1:1: expected a mapping of fields at the top level, got a list`},
		{"json bool number", "policy.json", `{"best_effort": 1}`,
			`policy.json:1:17: best_effort: expected true or false, got the number 1`},
		{"json unknown", "policy.json", "{\n  \"filesystem\": {\n    \"alow_write\": []\n  }\n}\n",
			`policy.json:3:5: unknown field "alow_write" in filesystem (did you mean "allow_write"?)`},
		{"json too deep", "policy.json", `{"env": ` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`,
			`policy.json:1:73: syntax error: nested too deeply`},
		{"headers not a list", "", "network:\n  headers: x\n",
			`policy.yaml:2:12: network.headers: expected a list of {host, set}, got the string "x"`},
		{"header rule without set", "", "network:\n  headers:\n    - host: a.example\n",
			`policy.yaml:3:7: network.headers[0]: set is required: the headers to set`},
		{"header rule typo", "", "network:\n  headers:\n    - host: a.example\n      sett: {A: b}\n",
			`policy.yaml:4:7: unknown field "sett" in network.headers[0] (did you mean "set"?)`},
		{"header name", "", "network:\n  headers:\n    - host: a.example\n      set: {\"A B\": b}\n",
			`policy.yaml:4:13: network.headers[0].set: invalid header name "A B"`},
		{"header dollar", "", "network:\n  headers:\n    - host: a.example\n      set: {A: $x}\n",
			`policy.yaml:4:13: network.headers[0].set: header A: "$" starts "${secrets.NAME}" or "$$" (a "$"), nothing else`},
		{"header host everywhere", "", "network:\n  headers:\n    - host: \"*\"\n      set: {A: b}\n",
			`policy.yaml:3:13: network.headers[0].host: "*" would set the headers on every request; name the hosts`},
		{"json content in yaml file", "", "{\"network\": {\"mode\": \"open\"}}",
			`policy.yaml:1:22: network.mode: unknown mode "open" (allowed: "none", "proxy", "host")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := tt.file
			if file == "" {
				file = "policy.yaml"
			}
			_, err := Parse(file, []byte(tt.in))
			if err == nil {
				t.Fatalf("Parse(%q) succeeded, want %s", tt.in, tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("Parse(%q)\n got: %s\nwant: %s", tt.in, err, tt.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not match ErrInvalid", err)
			}
		})
	}
}

func TestParse(t *testing.T) {
	full := Spec{
		Root: "/srv/rootfs",
		Filesystem: Filesystem{
			Workspace:       "~/src/app",
			AllowWrite:      []string{"/tmp/cache", "build"},
			DenyRead:        []string{"~/.secret"},
			AllowRead:       []string{"~/.ssh/known_hosts"},
			DenyWrite:       []string{"config/prod.json"},
			NoDefaultDenies: true,
		},
		Network: Network{
			Mode:           "none",
			AllowedDomains: []string{"github.com", "*.npmjs.org", "api.example.com:443", "[::1]:8080"},
			DeniedDomains:  []string{"*:22", "evil.example"},
		},
		Env: Env{
			Pass: []string{"GOPATH", "MYAPP_*"},
			Set:  map[string]string{"CI": "1", "EMPTY": "", "GREETING": "hello world"},
		},
		Resources: Resources{
			MemoryBytes: 3 * gib / 2,
			CPUs:        1.5,
			Pids:        256,
			Timeout:     90 * time.Second,
			TmpBytes:    64 * mib,
		},
		BestEffort: true,
	}
	tests := []struct {
		name string
		file string
		in   string
		want Spec
	}{
		{"empty", "policy.yaml", "", Spec{}},
		{"comments only", "policy.yaml", "# nothing here\n", Spec{}},
		{"null document", "policy.yaml", "~\n", Spec{}},
		{"empty json file", "policy.json", "  \n", Spec{}},
		{"empty json object", "policy.json", "{}", Spec{}},
		{"byte order mark", "policy.json", "\xef\xbb\xbf{\"best_effort\": true}", Spec{BestEffort: true}},
		{"null sections", "policy.yaml", "filesystem:\nnetwork: ~\nresources: {}\n", Spec{}},
		{"yaml", "policy.yaml", `
# A complete policy.
root: /srv/rootfs
filesystem:
  workspace: ~/src/app
  allow_write: [/tmp/cache, build]
  deny_read:
    - ~/.secret
  allow_read: [~/.ssh/known_hosts]
  deny_write: [config/prod.json]
  no_default_denies: true
network:
  mode: none
  allowed_domains: [github.com, "*.npmjs.org", "api.example.com:443", "[::1]:8080"]
  denied_domains: ["*:22", evil.example]
env:
  pass: [GOPATH, MYAPP_*]
  set:
    CI: 1
    EMPTY: ""
    GREETING: hello world
resources:
  memory: 1.5g
  cpus: 1.5
  pids: 256
  timeout: 90
  tmp_size: 64MiB
best_effort: true
`, full},
		{"json", "policy.json", `{
  "root": "/srv/rootfs",
  "filesystem": {
    "workspace": "~\/src\/app",
    "allow_write": ["/tmp/cache", "build"],
    "deny_read": ["~/.secret"],
    "allow_read": ["~/.ssh/known_hosts"],
    "deny_write": ["config/prod.json"],
    "no_default_denies": true
  },
  "network": {
    "mode": "none",
    "allowed_domains": ["github.com", "*.npmjs.org", "api.example.com:443", "[::1]:8080"],
    "denied_domains": ["*:22", "evil.example"]
  },
  "env": {"pass": ["GOPATH", "MYAPP_*"], "set": {"CI": 1, "EMPTY": "", "GREETING": "hello world"}},
  "resources": {"memory": "1536m", "cpus": 1.5, "pids": 256, "timeout": "1m30s", "tmp_size": 67108864},
  "best_effort": true
}`, full},
		{"aliases", "policy.yaml", "filesystem:\n  deny_read: &secrets [/a, /b]\n  allow_read: *secrets\n",
			Spec{Filesystem: Filesystem{DenyRead: []string{"/a", "/b"}, AllowRead: []string{"/a", "/b"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.file, []byte(tt.in))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parse\n got: %+v\nwant: %+v", got, tt.want)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(good, []byte("resources:\n  pids: 64\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Load(good)
	if err != nil || s.Resources.Pids != 64 {
		t.Fatalf("Load(%q) = %+v, %v; want pids 64", good, s, err)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("resources:\n  pids: many\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(bad)
	if want := bad + `:2:9: resources.pids: expected an integer, got the string "many"`; err == nil || err.Error() != want {
		t.Errorf("Load(bad) error = %v, want %s", err, want)
	}

	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("# "+strings.Repeat("x", maxFileSize)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	missing := filepath.Join(dir, "missing.yaml")
	tests := []struct {
		name   string
		path   string
		want   string
		target error
	}{
		{"missing", missing, `read policy "` + missing + `": no such file or directory`, fs.ErrNotExist},
		{"directory", dir, `read policy "` + dir + `": is a directory`, nil},
		{"too large", big, `read policy "` + big + `": larger than 1m`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.path)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Load error = %v, want %s", err, tt.want)
			}
			if errors.Is(err, ErrInvalid) {
				t.Errorf("read error %v matches ErrInvalid", err)
			}
			if tt.target != nil && !errors.Is(err, tt.target) {
				t.Errorf("error %v does not match %v", err, tt.target)
			}
		})
	}
}

// TestFieldNames keeps the loader's field table and Format's structs in step
// with the json/yaml tags of Spec, which name the fields of a policy file.
func TestFieldNames(t *testing.T) {
	tagNames := func(typ reflect.Type, tag string) []string {
		var out []string
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get(tag), ",")
			out = append(out, name)
		}
		return out
	}
	sections := map[string]reflect.Type{
		"":                reflect.TypeFor[Spec](),
		"filesystem":      reflect.TypeFor[Filesystem](),
		"network":         reflect.TypeFor[Network](),
		"secrets":         reflect.TypeFor[Secret](),
		"env":             reflect.TypeFor[Env](),
		"resources":       reflect.TypeFor[Resources](),
		"network.headers": reflect.TypeFor[HeaderRule](),
		"approvals":       reflect.TypeFor[Approvals](),
	}
	formats := map[string]reflect.Type{
		"":                reflect.TypeFor[formatSpec](),
		"filesystem":      reflect.TypeFor[formatFilesystem](),
		"network":         reflect.TypeFor[formatNetwork](),
		"secrets":         reflect.TypeFor[Secret](),
		"env":             reflect.TypeFor[formatEnv](),
		"resources":       reflect.TypeFor[formatResources](),
		"network.headers": reflect.TypeFor[HeaderRule](),
		"approvals":       reflect.TypeFor[Approvals](),
	}
	for _, sec := range policyFields("") {
		if _, ok := sections[sec]; !ok && policyFields(sec) != nil {
			t.Errorf("policyFields knows a section %q that Spec does not have", sec)
		}
	}
	for sec, typ := range sections {
		yamlNames, jsonNames := tagNames(typ, "yaml"), tagNames(typ, "json")
		if !reflect.DeepEqual(yamlNames, jsonNames) {
			t.Errorf("section %q: yaml tags %v differ from json tags %v", sec, yamlNames, jsonNames)
		}
		if !reflect.DeepEqual(policyFields(sec), yamlNames) {
			t.Errorf("section %q: loader knows %v, Spec has %v", sec, policyFields(sec), yamlNames)
		}
		if got := tagNames(formats[sec], "yaml"); !reflect.DeepEqual(got, yamlNames) {
			t.Errorf("section %q: Format prints %v, Spec has %v", sec, got, yamlNames)
		}
	}
}

// TestHeaderRulesPolicy: network.headers round-trips through Format, and
// Validate holds a rule to the policy's secrets and their hosts.
func TestHeaderRulesPolicy(t *testing.T) {
	in := "network:\n  allowed_domains: [api.example]\n  headers:\n    - host: API.example\n      set:\n        Authorization: \"Bearer ${secrets.TOKEN}\"\n        X-Cost: \"$$5\"\nsecrets:\n  - name: TOKEN\n    hosts: [api.example]\n"
	s, err := Parse("policy.yaml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Normalize("/w", ""); err != nil {
		t.Fatal(err)
	}
	if got := s.Network.Headers; len(got) != 1 || got[0].Host != "api.example" || got[0].Set["X-Cost"] != "$$5" {
		t.Errorf("headers = %+v", got)
	}
	out, err := s.Format()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse("policy.yaml", out)
	if err != nil || !reflect.DeepEqual(back.Network.Headers, s.Network.Headers) {
		t.Errorf("Format then Parse: %+v, %v; want %+v\n%s", back.Network.Headers, err, s.Network.Headers, out)
	}
	for _, c := range []struct{ in, want string }{
		{"network:\n  allowed_domains: [a.example]\n  headers:\n    - host: other.example\n      set: {A: \"${secrets.TOKEN}\"}\nsecrets:\n  - name: TOKEN\n    hosts: [a.example]\n",
			"network.headers[0].set.A: secret TOKEN is not bound to other.example (its hosts: a.example)"},
		{"network:\n  allowed_domains: [a.example]\n  headers:\n    - host: a.example\n      set: {A: \"${secrets.NOPE}\"}\n",
			"network.headers[0].set.A: the policy has no secret NOPE"},
		{"network:\n  mode: none\n  headers:\n    - host: a.example\n      set: {A: b}\n",
			`network.headers: need network mode "proxy"`},
	} {
		s, err := Parse("policy.yaml", []byte(c.in))
		if err == nil {
			err = s.Normalize(t.TempDir(), "")
		}
		if err == nil {
			err = s.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.in, err, c.want)
		}
	}
}
