package policy

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// srtAction says what LoadSRT does with a setting of srt, the sandbox
// runtime of Anthropic (npm @anthropic-ai/sandbox-runtime).
type srtAction int

const (
	// srtMapped settings become part of the Spec.
	srtMapped srtAction = iota
	// srtIgnored settings are dropped with a warning when set (true, a
	// non-empty list or mapping, or any other value). Every such setting
	// grants something hutch does not, configures srt's own machinery, or
	// applies to macOS or Windows only: dropping it never widens access.
	srtIgnored
	// srtCovered settings are dropped without a warning: hutch already
	// behaves as they ask, or another warning covers them.
	srtCovered
)

// srtField is one setting of an srt settings file. Names are dotted paths;
// "[]" stands for every entry of a list.
type srtField struct {
	name   string
	action srtAction
	note   string // for ignored settings, what hutch does instead
}

// srtFields lists every setting of srt's settings schema and what LoadSRT
// does with it; docs/srt-settings.md gives the same table for users. A
// setting not listed here is not an srt setting, and LoadSRT refuses it.
// Inside an ignored object (tlsTerminate, ripgrep, …) nothing is checked.
var srtFields = []srtField{
	// Filesystem. Paths may be relative to the current directory or start
	// with "~", as in srt; Normalize resolves them.
	{"filesystem", srtMapped, ""},
	{"filesystem.denyRead", srtMapped, "filesystem.deny_read; patterns are refused"},
	{"filesystem.allowRead", srtMapped, "filesystem.allow_read; patterns are dropped with a warning"},
	{"filesystem.allowWrite", srtMapped, "filesystem.allow_write; patterns are dropped with a warning"},
	{"filesystem.denyWrite", srtMapped, "filesystem.deny_write; patterns are refused"},
	{"filesystem.allowGitConfig", srtIgnored, ".git/config stays read-only"},
	{"filesystem.disabled", srtIgnored, "the filesystem policy always applies"},

	// Network.
	{"network", srtMapped, ""},
	{"network.allowedDomains", srtMapped, "network.allowed_domains; an entry without a port gets \":*\" (srt: every port); with any entry, network.private_names opens srt's private-use and reserved ranges to names"},
	{"network.deniedResolvedAddresses", srtMapped, "taken out of network.private_names; a public address goes to network.denied_domains; a public range is refused"},
	{"network.deniedDomains", srtMapped, "network.denied_domains"},
	{"network.deniedDomainReasons", srtIgnored, "denials give no custom reason"},
	{"network.strictAllowlist", srtCovered, "unlisted hosts are denied (asked about only where the policy sets network.on_unknown: ask)"},
	{"network.allowUnixSockets", srtIgnored, "host daemon sockets stay denied"},
	{"network.allowAllUnixSockets", srtIgnored, "host daemon sockets stay denied"},
	{"network.allowLocalBinding", srtIgnored, "the sandbox may always bind its own loopback; to reach the host's, as srt on macOS lets it, list localhost:PORT in allowedDomains"},
	{"network.allowMachLookup", srtIgnored, "macOS only"},
	{"network.httpProxyPort", srtIgnored, "an external proxy cannot be used"},
	{"network.socksProxyPort", srtIgnored, "an external proxy cannot be used"},
	{"network.mitmProxy", srtIgnored, "no upstream MITM proxy"},
	{"network.filterRequest", srtIgnored, "a library callback, not a file setting"},
	{"network.tlsTerminate", srtIgnored, "no TLS termination"},
	{"network.parentProxy", srtIgnored, "no upstream proxy"},

	// Credentials. hutch passes the sandbox only allow-listed variables
	// (SafeEnv and env.pass), so a denied variable is already withheld.
	{"credentials", srtMapped, ""},
	{"credentials.files", srtMapped, ""},
	{"credentials.files[].path", srtMapped, "added to filesystem.deny_read"},
	{"credentials.files[].mode", srtMapped, `"deny"; "mask" is treated as "deny" with a warning`},
	{"credentials.files[].extract", srtCovered, "masking only"},
	{"credentials.files[].onExtractNoMatch", srtCovered, "masking only"},
	{"credentials.files[].decode", srtCovered, "masking only"},
	{"credentials.files[].maskClaims", srtCovered, "masking only"},
	{"credentials.files[].maskDuplicates", srtCovered, "masking only"},
	{"credentials.files[].injectHosts", srtCovered, "masking only"},
	{"credentials.envVars", srtMapped, ""},
	{"credentials.envVars[].name", srtMapped, "withheld (refused if it is in SafeEnv)"},
	{"credentials.envVars[].mode", srtMapped, `"deny"; "mask" is treated as "deny" with a warning`},
	{"credentials.envVars[].extract", srtCovered, "masking only"},
	{"credentials.envVars[].onExtractNoMatch", srtCovered, "masking only"},
	{"credentials.envVars[].decode", srtCovered, "masking only"},
	{"credentials.envVars[].maskClaims", srtCovered, "masking only"},
	{"credentials.envVars[].injectHosts", srtCovered, "masking only"},
	{"credentials.allowPlaintextInject", srtIgnored, "no credential injection"},
	{"credentials.awsPairs", srtIgnored, "no credential injection"},
	{"credentials.sigv4", srtIgnored, "no credential injection"},

	// srt's own machinery, and other platforms.
	{"ignoreViolations", srtIgnored, "violations are not filtered"},
	{"enableWeakerNestedSandbox", srtIgnored, "hutch never weakens itself; see best_effort"},
	{"enableWeakerNetworkIsolation", srtIgnored, "macOS only"},
	{"allowAppleEvents", srtIgnored, "macOS only"},
	{"allowPty", srtIgnored, "macOS only"},
	{"ripgrep", srtIgnored, "hutch does not scan for files"},
	{"mandatoryDenySearchDepth", srtIgnored, "hutch does not scan for files"},
	{"seccomp", srtIgnored, "hutch has its own seccomp filter"},
	{"bwrapPath", srtIgnored, "hutch does not use bubblewrap"},
	{"socatPath", srtIgnored, "hutch does not use socat"},
	{"javaAgentJarPath", srtIgnored, "no JVM proxy agent"},
	{"windows", srtIgnored, "Windows only"},
	{"git", srtIgnored, "no git configuration is injected"},
}

// srtLookup returns the field called name, or nil.
func srtLookup(name string) *srtField {
	for i := range srtFields {
		if srtFields[i].name == name {
			return &srtFields[i]
		}
	}
	return nil
}

// srtChildren returns the names of the settings directly below prefix
// ("" for the top level, "network.", "credentials.files[].").
func srtChildren(prefix string) []string {
	var out []string
	for _, f := range srtFields {
		rest, ok := strings.CutPrefix(f.name, prefix)
		if ok && rest != "" && !strings.ContainsAny(rest, ".[") {
			out = append(out, rest)
		}
	}
	return out
}

// LoadSRT imports a settings file of srt (Anthropic's sandbox-runtime,
// usually ~/.srt-settings.json) as a Spec. srtFields says what becomes of
// each setting; the returned warnings, each "file:line:column: message",
// name the settings that were set but dropped. A setting srt does not know,
// a malformed value, or a deny rule hutch cannot enforce (a glob in
// denyRead or denyWrite) is an error. Call Normalize and Validate on the
// result as for Load.
func LoadSRT(path string) (Spec, []string, error) {
	data, err := readFile(path)
	if err != nil {
		return Spec{}, nil, err
	}
	return ParseSRT(path, data)
}

// ParseSRT is LoadSRT on the content of the file called name.
func ParseSRT(name string, data []byte) (Spec, []string, error) {
	root, err := parseDocument(name, data)
	if err != nil {
		return Spec{}, nil, err
	}
	d := &srtDecoder{decoder: decoder{file: name}, workspaceNote: true}
	s, err := d.spec(root)
	if err != nil {
		return Spec{}, nil, err
	}
	return s, d.warnings, nil
}

type srtDecoder struct {
	decoder
	warnings []string
	// at names the mapping the settings are in, for messages ("" at the
	// top of an srt file; "sandbox" in Claude Code's settings).
	at string
	// workspaceNote, when set, notes that hutch writes the workspace
	// although allowWrite does not list "." (srt writes nowhere unless
	// told; Claude Code's sandbox writes the current directory as hutch).
	workspaceNote bool
}

func (d *srtDecoder) warnf(n *yaml.Node, format string, args ...any) {
	d.warnings = append(d.warnings, fmt.Sprintf("%s:%d:%d: %s", d.file, n.Line, n.Column, fmt.Sprintf(format, args...)))
}

// section walks the mapping n of the settings under prefix, warning about
// ignored settings that are set and passing mapped ones to mapped. where
// names the mapping in messages.
func (d *srtDecoder) section(n *yaml.Node, prefix, where string, mapped func(e entry, field string) error) error {
	known := srtChildren(prefix)
	entries, err := d.mapping(n, where, known, func(s string) string { return suggestField(s, known) })
	if err != nil {
		return err
	}
	for _, e := range entries {
		field := e.key.Value
		if where != "" {
			field = where + "." + field
		}
		f := srtLookup(prefix + e.key.Value)
		switch f.action {
		case srtMapped:
			if err := mapped(e, field); err != nil {
				return err
			}
		case srtIgnored:
			if isSet(e.val) {
				d.warnf(e.key, "%s is not supported by hutch and was ignored (%s)", field, f.note)
			}
		}
	}
	return nil
}

// isSet reports whether an ignored setting asks for anything: true, a
// non-empty list or mapping, or any other non-null value.
func isSet(n *yaml.Node) bool {
	n = resolve(n)
	switch {
	case isNull(n):
		return false
	case n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode:
		return len(n.Content) > 0
	case n.Tag == "!!bool":
		return n.Value != "false"
	}
	return true
}

func (d *srtDecoder) spec(root *yaml.Node) (Spec, error) {
	var s Spec
	var fsKey, writeKey *yaml.Node
	var writesCwd bool
	err := d.section(root, "", d.at, func(e entry, field string) error {
		switch e.key.Value {
		case "filesystem":
			fsKey = e.key
			return d.section(e.val, "filesystem.", field, func(e entry, field string) error {
				var err error
				switch e.key.Value {
				case "denyRead":
					s.Filesystem.DenyRead, err = d.paths(e.val, field, true)
				case "allowRead":
					s.Filesystem.AllowRead, err = d.paths(e.val, field, false)
				case "allowWrite":
					writeKey = e.key
					s.Filesystem.AllowWrite, err = d.paths(e.val, field, false)
					for _, p := range s.Filesystem.AllowWrite {
						writesCwd = writesCwd || filepath.Clean(p) == "."
					}
				case "denyWrite":
					s.Filesystem.DenyWrite, err = d.paths(e.val, field, true)
				}
				return err
			})
		case "network":
			var deniedAddrs []string
			var deniedNode *yaml.Node
			err := d.section(e.val, "network.", field, func(e entry, field string) error {
				var err error
				switch e.key.Value {
				case "allowedDomains":
					// As in srt, allowed domains mean egress through the
					// proxy (Normalize makes the mode "proxy").
					s.Network.AllowedDomains, err = d.list(e.val, field, "domains", func(v string) error { return checkDomain(v, false) })
				case "deniedDomains":
					s.Network.DeniedDomains, err = d.list(e.val, field, "domains", func(v string) error { return checkDomain(v, true) })
				case "deniedResolvedAddresses":
					deniedNode = e.val
					deniedAddrs, err = d.list(e.val, field, "addresses or CIDRs", checkAddrOrCIDR)
				}
				return err
			})
			if err != nil {
				return err
			}
			return d.srtNetwork(&s.Network, deniedAddrs, deniedNode)
		case "credentials":
			return d.section(e.val, "credentials.", field, func(e entry, field string) error {
				return d.credentials(e, field, &s)
			})
		}
		return nil
	})
	if err != nil {
		return Spec{}, err
	}
	if !writesCwd && d.workspaceNote {
		at := root
		switch {
		case writeKey != nil:
			at = writeKey
		case fsKey != nil:
			at = fsKey
		case at == nil:
			at = &yaml.Node{Line: 1, Column: 1}
		}
		d.warnf(at, `filesystem.allowWrite does not list "."; hutch always lets the sandbox write its workspace (the current directory unless the policy names another)`)
	}
	return s, nil
}

// paths decodes a list of srt paths. hutch takes literal paths only: a
// pattern in a deny list is an error (it could not be enforced), in an
// allow list it is dropped with a warning.
func (d *srtDecoder) paths(n *yaml.Node, field string, deny bool) ([]string, error) {
	list, err := d.list(n, field, "paths", nil)
	if err != nil {
		return nil, err
	}
	var out []string
	for i, p := range list {
		item := resolve(resolve(n).Content[i])
		name := fmt.Sprintf("%s[%d]", field, i)
		if strings.ContainsAny(p, "*?[") {
			if deny {
				return nil, d.errorf(item, "%s: %q is a pattern; hutch takes literal paths only and cannot enforce it", name, p)
			}
			d.warnf(item, "%s: %q is a pattern; hutch takes literal paths only and ignored it", name, p)
			continue
		}
		if err := checkPath(p); err != nil {
			return nil, d.errorf(item, "%s: %v", name, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// credentials maps credentials.files and credentials.envVars.
func (d *srtDecoder) credentials(e entry, field string, s *Spec) error {
	kind := e.key.Value // "files" or "envVars"
	n := resolve(e.val)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return d.errorf(n, "%s: expected a list, got %s", field, describe(n))
	}
	for i, item := range n.Content {
		where := fmt.Sprintf("%s[%d]", field, i)
		var target, mode string
		var targetNode, modeNode *yaml.Node
		err := d.section(item, "credentials."+kind+"[].", where, func(e entry, field string) error {
			var err error
			switch e.key.Value {
			case "path", "name":
				targetNode = e.val
				target, err = d.str(e.val, field)
			case "mode":
				modeNode = e.val
				mode, err = d.str(e.val, field)
			}
			return err
		})
		if err != nil {
			return err
		}
		item = resolve(item)
		targetField := "path"
		if kind == "envVars" {
			targetField = "name"
		}
		switch {
		case target == "":
			return d.errorf(item, "%s: missing %s", where, targetField)
		case modeNode == nil:
			return d.errorf(item, "%s: missing mode (\"deny\" or \"mask\")", where)
		case mode != "deny" && mode != "mask":
			return d.errorf(modeNode, "%s.mode: unknown mode %q (allowed: \"deny\", \"mask\")", where, mode)
		}
		if kind == "files" {
			if err := checkPath(target); err != nil {
				return d.errorf(targetNode, "%s.path: %v", where, err)
			}
			s.Filesystem.DenyRead = append(s.Filesystem.DenyRead, target)
			if mode == "mask" {
				d.warnf(modeNode, "%s.mode: masking is not supported by hutch; %q is denied instead", where, target)
			}
			continue
		}
		if err := checkEnvName(target, false); err != nil {
			return d.errorf(targetNode, "%s.name: %v", where, err)
		}
		if matchEnv(target, SafeEnv) {
			return d.errorf(targetNode, "%s.name: %q is passed to every hutch sandbox (see SafeEnv) and cannot be withheld", where, target)
		}
		if mode == "mask" {
			d.warnf(modeNode, "%s.mode: masking is not supported by hutch; %s is withheld instead", where, target)
		}
	}
	return nil
}

// srtNetwork makes an imported network policy let through what srt does.
// srt matches an allowed domain without a port on every port; hutch on 80
// and 443 only: such an entry gets ":*". srt lets an allowed name resolve
// to private-use and reserved addresses (an intranet name allowed on
// purpose), and refuses only loopback, link-local, multicast, metadata,
// this host's addresses and deniedResolvedAddresses; hutch's guard refuses
// them all unless network.private_names opens them: it gets srt's ranges,
// less deniedResolvedAddresses. An address of deniedResolvedAddresses that
// hutch would let through anyway (a public one) is denied outright with
// network.denied_domains; a public range cannot be, and is an error.
// localhost entries and names that resolve to an allowed IP literal need
// nothing here: hutch run's rules are the operator's, which open them.
func (d *srtDecoder) srtNetwork(nw *Network, denied []string, deniedNode *yaml.Node) error {
	for i, dom := range nw.AllowedDomains {
		if !domainHasPort(dom) {
			nw.AllowedDomains[i] = dom + ":" + AnyPort
		}
	}
	names, guarded := srtNameRanges(), guardedRanges()
	open := slices.Clone(names)
	for i, a := range denied {
		p := addrOrCIDR(a)
		for _, o := range names {
			if o.Overlaps(p) {
				open = subtractPrefix(open, p)
				break
			}
		}
		if within(p, names) || within(p, guarded) {
			continue
		}
		if !p.IsSingleIP() {
			item := resolve(resolve(deniedNode).Content[i])
			return d.errorf(item, "network.deniedResolvedAddresses[%d]: %q holds public addresses: hutch can refuse a name's public address only one at a time (list them), as it refuses every non-public one already", i, a)
		}
		nw.DeniedDomains = append(nw.DeniedDomains, bracketV6(p.Addr()))
	}
	if len(nw.AllowedDomains) == 0 {
		return nil
	}
	for _, p := range open {
		nw.PrivateNames = append(nw.PrivateNames, p.String())
	}
	return nil
}

// srtNameRanges returns the private-use and reserved ranges that srt lets
// an allowed name resolve to, and that hutch's guard refuses unless
// network.private_names opens them. (Parsed at each call, which only an
// srt settings file makes: not during package initialization, at every
// start of hutch.)
func srtNameRanges() []netip.Prefix {
	return mustPrefixes(
		"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",
		"192.0.0.0/24", "192.0.2.0/24", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4",
		"fc00::/7", "fec0::/10", "64:ff9b:1::/48", "100::/64", "2001:db8::/32", "2001::/32",
	)
}

// guardedRanges returns ranges whose addresses hutch refuses to a name
// whatever network.private_names says: unspecified, loopback, link-local,
// multicast.
func guardedRanges() []netip.Prefix {
	return mustPrefixes(
		"0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4",
		"::/128", "::1/128", "fe80::/10", "ff00::/8",
	)
}

func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// within reports whether p lies wholly in one of ranges.
func within(p netip.Prefix, ranges []netip.Prefix) bool {
	for _, r := range ranges {
		if r.Addr().Is4() == p.Addr().Is4() && r.Bits() <= p.Bits() && r.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// subtractPrefix returns ranges without the addresses of cut.
func subtractPrefix(ranges []netip.Prefix, cut netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, r := range ranges {
		switch {
		case !r.Overlaps(cut):
			out = append(out, r)
		case cut.Bits() <= r.Bits():
			// cut holds all of r.
		default:
			// r less cut: the sibling of each prefix on the way from r
			// down to cut.
			for bits := r.Bits() + 1; bits <= cut.Bits(); bits++ {
				on := netip.PrefixFrom(cut.Addr(), bits).Masked()
				b := on.Addr().AsSlice()
				b[(bits-1)/8] ^= 0x80 >> ((bits - 1) % 8)
				sib, _ := netip.AddrFromSlice(b)
				out = append(out, netip.PrefixFrom(sib, bits))
			}
		}
	}
	return out
}

// addrOrCIDR parses an address or a CIDR that checkAddrOrCIDR accepted, as
// a prefix (of one address for an address), IPv4-mapped ones as IPv4.
func addrOrCIDR(s string) netip.Prefix {
	if p, err := netip.ParsePrefix(s); err == nil {
		p = p.Masked()
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p
	}
	a, _ := netip.ParseAddr(s)
	a = a.WithZone("").Unmap()
	return netip.PrefixFrom(a, a.BitLen())
}

// checkAddrOrCIDR validates an entry of srt's deniedResolvedAddresses: an
// IP address or a CIDR, unbracketed.
func checkAddrOrCIDR(s string) error {
	if _, err := netip.ParseAddr(s); err == nil {
		return nil
	}
	if _, err := netip.ParsePrefix(s); err == nil {
		return nil
	}
	return fmt.Errorf("%q is neither an IP address nor a CIDR", s)
}

// bracketV6 spells an address as a host of a domain entry.
func bracketV6(a netip.Addr) string {
	if a.Is6() {
		return "[" + a.String() + "]"
	}
	return a.String()
}

// domainHasPort reports whether a domain entry that checkDomain accepted
// names a port.
func domainHasPort(s string) bool {
	if strings.HasPrefix(s, "[") {
		return strings.Contains(s[strings.IndexByte(s, ']'):], ":")
	}
	return strings.Count(s, ":") == 1
}
