package policy

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestLoadSRT(t *testing.T) {
	const file = "testdata/srt-settings.json"
	got, warnings, err := LoadSRT(file)
	if err != nil {
		t.Fatalf("LoadSRT: %v", err)
	}
	want := Spec{
		Filesystem: Filesystem{
			AllowWrite: []string{".", "/tmp", "build/"},
			DenyRead:   []string{"~/.ssh", "/etc/secret", "~/.config/tokens.json", "~/.netrc"},
			AllowRead:  []string{"~/.ssh/known_hosts"},
			DenyWrite:  []string{".env", "config/production.json"},
		},
		Network: Network{
			// srt matches an entry without a port on every port.
			AllowedDomains: []string{"github.com:*", "*.npmjs.org:*", "api.example.com:443"},
			DeniedDomains:  []string{"malicious.example", "*:22"},
			PrivateNames:   srtNames(),
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("LoadSRT\n got: %+v\nwant: %+v", got, want)
	}
	wantWarnings := []string{
		file + `:5:5: network.allowUnixSockets is not supported by hutch and was ignored (host daemon sockets stay denied)`,
		file + `:8:5: network.httpProxyPort is not supported by hutch and was ignored (an external proxy cannot be used)`,
		file + `:12:41: filesystem.allowRead[1]: "src/**/*.ts" is a pattern; hutch takes literal paths only and ignored it`,
		file + `:15:5: filesystem.allowGitConfig is not supported by hutch and was ignored (.git/config stays read-only)`,
		file + `:20:36: credentials.files[1].mode: masking is not supported by hutch; "~/.netrc" is denied instead`,
		file + `:24:37: credentials.envVars[1].mode: masking is not supported by hutch; NPM_TOKEN is withheld instead`,
		file + `:27:3: ignoreViolations is not supported by hutch and was ignored (violations are not filtered)`,
		file + `:31:3: mandatoryDenySearchDepth is not supported by hutch and was ignored (hutch does not scan for files)`,
	}
	if !reflect.DeepEqual(warnings, wantWarnings) {
		t.Errorf("warnings\n got: %s\nwant: %s", strings.Join(warnings, "\n      "), strings.Join(wantWarnings, "\n      "))
	}

	// The imported spec normalizes like any other.
	if err := got.Normalize("/w", "/home/u"); err != nil {
		t.Fatalf("Normalize: %v", err)
	}
	if want := []string{"/tmp", "/w/build"}; !reflect.DeepEqual(got.Filesystem.AllowWrite, want) {
		t.Errorf("normalized allow_write = %q, want %q", got.Filesystem.AllowWrite, want)
	}
}

func TestParseSRTWarnings(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"defaults are quiet", `{
  "network": {"allowedDomains": [], "deniedDomains": [], "allowLocalBinding": false, "allowUnixSockets": []},
  "filesystem": {"denyRead": [], "allowWrite": ["./"], "denyWrite": [], "allowGitConfig": false},
  "enableWeakerNestedSandbox": false,
  "ignoreViolations": {}
}`, nil},
		{"empty file", ``, []string{
			`srt.json:1:1: filesystem.allowWrite does not list "."; hutch always lets the sandbox write its workspace (the current directory unless the policy names another)`,
		}},
		{"no filesystem", `{"network": {"allowedDomains": []}}`, []string{
			`srt.json:1:1: filesystem.allowWrite does not list "."; hutch always lets the sandbox write its workspace (the current directory unless the policy names another)`,
		}},
		{"no allowWrite", "{\n  \"filesystem\": {\"denyRead\": []}\n}", []string{
			`srt.json:2:3: filesystem.allowWrite does not list "."; hutch always lets the sandbox write its workspace (the current directory unless the policy names another)`,
		}},
		{"allowWrite elsewhere", "{\"filesystem\": {\n  \"allowWrite\": [\"/tmp\", \"src/**\"]}}", []string{
			`srt.json:2:26: filesystem.allowWrite[1]: "src/**" is a pattern; hutch takes literal paths only and ignored it`,
			`srt.json:2:3: filesystem.allowWrite does not list "."; hutch always lets the sandbox write its workspace (the current directory unless the policy names another)`,
		}},
		{"platform settings", "{\"filesystem\": {\"allowWrite\": [\".\"]},\n\"allowPty\": true, \"windows\": {\"sandboxUser\": \"x\"}, \"bwrapPath\": \"/usr/bin/bwrap\",\n\"network\": {\"allowMachLookup\": [\"com.x.*\"], \"strictAllowlist\": false}}", []string{
			`srt.json:2:1: allowPty is not supported by hutch and was ignored (macOS only)`,
			`srt.json:2:19: windows is not supported by hutch and was ignored (Windows only)`,
			`srt.json:2:52: bwrapPath is not supported by hutch and was ignored (hutch does not use bubblewrap)`,
			`srt.json:3:13: network.allowMachLookup is not supported by hutch and was ignored (macOS only)`,
		}},
		{"credentials extras", "{\"filesystem\": {\"allowWrite\": [\".\"]},\n\"credentials\": {\"allowPlaintextInject\": true, \"files\": []}}", []string{
			`srt.json:2:17: credentials.allowPlaintextInject is not supported by hutch and was ignored (no credential injection)`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, warnings, err := ParseSRT("srt.json", []byte(tt.in))
			if err != nil {
				t.Fatalf("ParseSRT: %v", err)
			}
			if !reflect.DeepEqual(warnings, tt.want) {
				t.Errorf("warnings\n got: %q\nwant: %q", warnings, tt.want)
			}
		})
	}
}

func TestParseSRTErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"unknown top level", "{\n  \"netwrok\": {}\n}",
			`srt.json:2:3: unknown field "netwrok" at the top level (did you mean "network"?)`},
		{"unknown network field", "{\"network\": {\n    \"allowedDomain\": []}}",
			`srt.json:2:5: unknown field "allowedDomain" in network (did you mean "allowedDomains"?)`},
		{"hutch spelling", "{\"filesystem\": {\"allow_write\": []}}",
			`srt.json:1:17: unknown field "allow_write" in filesystem (did you mean "allowWrite"?)`},
		{"unknown credential field", "{\"credentials\": {\"files\": [{\"path\": \"/x\", \"mode\": \"deny\", \"colour\": 1}]}}",
			`srt.json:1:59: unknown field "colour" in credentials.files[0]`},
		{"type", "{\"filesystem\": {\"denyRead\": \"~/.ssh\"}}",
			`srt.json:1:29: filesystem.denyRead: expected a list of paths, got the string "~/.ssh"`},
		{"deny glob", "{\"filesystem\": {\"denyRead\": [\"~/.ssh\", \"**/.env\"]}}",
			`srt.json:1:40: filesystem.denyRead[1]: "**/.env" is a pattern; hutch takes literal paths only and cannot enforce it`},
		{"deny write glob", "{\"filesystem\": {\"denyWrite\": [\"*.pem\"]}}",
			`srt.json:1:31: filesystem.denyWrite[0]: "*.pem" is a pattern; hutch takes literal paths only and cannot enforce it`},
		{"domain", "{\"network\": {\"allowedDomains\": [\"*.com\"]}}",
			`srt.json:1:33: network.allowedDomains[0]: invalid domain "*.com": too broad: a wildcard needs at least two labels after "*."`},
		{"duplicate", "{\"network\": {}, \"network\": {}}",
			`srt.json:1:17: duplicate field "network" at the top level (first given at line 1)`},
		{"credentials not list", "{\"credentials\": {\"files\": {}}}",
			`srt.json:1:27: credentials.files: expected a list, got a mapping`},
		{"credential without mode", "{\"credentials\": {\"files\": [{\"path\": \"/x\"}]}}",
			`srt.json:1:28: credentials.files[0]: missing mode ("deny" or "mask")`},
		{"credential without path", "{\"credentials\": {\"files\": [{\"mode\": \"deny\"}]}}",
			`srt.json:1:28: credentials.files[0]: missing path`},
		{"credential bad mode", "{\"credentials\": {\"envVars\": [{\"name\": \"X\", \"mode\": \"hide\"}]}}",
			`srt.json:1:52: credentials.envVars[0].mode: unknown mode "hide" (allowed: "deny", "mask")`},
		{"withhold safe variable", "{\"credentials\": {\"envVars\": [{\"name\": \"LC_ALL\", \"mode\": \"deny\"}]}}",
			`srt.json:1:39: credentials.envVars[0].name: "LC_ALL" is passed to every hutch sandbox (see SafeEnv) and cannot be withheld`},
		{"syntax", "{\n  \"network\": {\n    \"allowedDomains\": [\"a.com\",]\n  }\n}",
			`srt.json:3:32: syntax error: invalid character ']' looking for beginning of value`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := ParseSRT("srt.json", []byte(tt.in))
			if err == nil || err.Error() != tt.want {
				t.Fatalf("ParseSRT error = %v\nwant %s", err, tt.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not match ErrInvalid", err)
			}
		})
	}
}

// TestSRTFields checks the srt table: unique names, every nested name under
// a mapped parent, and every ignored setting explained.
func TestSRTFields(t *testing.T) {
	seen := make(map[string]bool)
	for _, f := range srtFields {
		if seen[f.name] {
			t.Errorf("srt field %q listed twice", f.name)
		}
		seen[f.name] = true
		if f.action == srtIgnored && f.note == "" {
			t.Errorf("ignored srt field %q has no note", f.name)
		}
		if i := strings.LastIndexByte(f.name, '.'); i >= 0 {
			parent := strings.TrimSuffix(f.name[:i], "[]")
			if p := srtLookup(parent); p == nil || p.action != srtMapped {
				t.Errorf("srt field %q: parent %q is not a mapped field", f.name, parent)
			}
		}
	}
}

// TestSRTDocs keeps docs/srt-settings.md listing every srt setting.
func TestSRTDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/srt-settings.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range srtFields {
		if !strings.Contains(f.name, ".") {
			continue // a section: its settings are listed
		}
		short := f.name[strings.LastIndex(f.name, ".")+1:] // rows may group fields of one list entry
		if !strings.Contains(string(doc), "`"+f.name+"`") && !strings.Contains(string(doc), "`"+short+"`") {
			t.Errorf("docs/srt-settings.md does not mention `%s`", f.name)
		}
	}
}

// srtNames are the ranges srtNameRanges as strings.
func srtNames() []string {
	var out []string
	for _, p := range srtNameRanges() {
		out = append(out, p.String())
	}
	return out
}

// TestSRTNetwork: what srt lets through, the import lets through —
// every port of an entry without one, names that resolve to private-use
// and reserved addresses — less deniedResolvedAddresses, and a public
// range there, which hutch cannot refuse to names, is an error.
func TestSRTNetwork(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		want     Network
		err      string
	}{
		{"no domains", `{"network": {"allowedDomains": []}}`, Network{}, ""},
		{"ports", `{"network": {"allowedDomains": ["a.example.com", "[::1]", "[::1]:8080", "localhost", "127.0.0.1:3000"]}}`,
			Network{AllowedDomains: []string{"a.example.com:*", "[::1]:*", "[::1]:8080", "localhost:*", "127.0.0.1:3000"}, PrivateNames: srtNames()}, ""},
		{"denied resolved", `{"network": {"allowedDomains": ["a.example.com:443"], "deniedResolvedAddresses": ["10.0.0.0/8", "172.16.5.0/24", "fc00::/7", "8.8.8.8", "2001:4860::8888", "127.0.0.1", "169.254.0.0/16"]}}`,
			Network{AllowedDomains: []string{"a.example.com:443"}, DeniedDomains: []string{"8.8.8.8", "[2001:4860::8888]"}, PrivateNames: func() []string {
				var out []string
				for _, p := range srtNames() {
					switch p {
					case "10.0.0.0/8", "fc00::/7":
					case "172.16.0.0/12":
						out = append(out, "172.24.0.0/13", "172.20.0.0/14", "172.18.0.0/15", "172.17.0.0/16", "172.16.128.0/17",
							"172.16.64.0/18", "172.16.32.0/19", "172.16.16.0/20", "172.16.8.0/21", "172.16.0.0/22", "172.16.6.0/23", "172.16.4.0/24")
					default:
						out = append(out, p)
					}
				}
				return out
			}()}, ""},
		{"public range", `{"network": {"allowedDomains": ["a.example.com"], "deniedResolvedAddresses": ["10.0.0.0/8", "8.8.8.0/24"]}}`, Network{},
			`srt.json:1:93: network.deniedResolvedAddresses[1]: "8.8.8.0/24" holds public addresses`},
		{"not an address", `{"network": {"deniedResolvedAddresses": ["example.com"]}}`, Network{},
			`srt.json:1:42: network.deniedResolvedAddresses[0]: "example.com" is neither an IP address nor a CIDR`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := ParseSRT("srt.json", []byte(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Network, tt.want) {
				t.Errorf("network\n got: %+v\nwant: %+v", got.Network, tt.want)
			}
			// What the import makes validates.
			if err := got.Normalize(t.TempDir(), "/home/u"); err != nil {
				t.Fatal(err)
			}
			if err := got.Validate(); err != nil {
				t.Error(err)
			}
		})
	}
}
