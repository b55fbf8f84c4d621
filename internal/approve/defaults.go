package approve

import "fmt"

// Sources of the shipped rules, as Rule.Source says.
const (
	SourceDefaults = "default rules"
	sourcePreset   = "preset "
)

// The presets, after Codex's approval modes.
const (
	PresetReadOnly       = "read-only"
	PresetWorkspaceWrite = "workspace-write"
	PresetFull           = "full"
	PresetNone           = "none"
)

// Presets lists the preset names a policy may select.
var Presets = []string{PresetReadOnly, PresetWorkspaceWrite, PresetFull, PresetNone}

// DefaultRules are the classic dangers, shipped with hutch and always
// applied unless a policy turns them off: wiping the root or the home,
// piping a download into an interpreter, force-pushing, writing to block
// devices, making file systems, opening the whole tree to everyone,
// stopping the machine.
func DefaultRules() []Rule {
	d := func(a Action, p ...string) Rule { return Rule{Action: a, Pattern: p, Source: SourceDefaults} }
	var rules []Rule
	for _, target := range []string{"/", "//", "/.", "/./", "/..", `/\*`, `/.\*`, "~", "~/", `~/\*`, "/home", "/root", "/etc", "/usr", "/boot", "/var", "/bin", "/lib"} {
		rules = append(rules, d(Deny, "rm", "**", target))
	}
	rules = append(rules,
		d(Deny, "rm", "**", "--no-preserve-root", "**"),
	)
	for _, dl := range []string{"curl", "wget", "fetch", "aria2c"} {
		for _, interp := range []string{"*sh", "python*", "perl", "ruby", "node", "php"} {
			rules = append(rules, d(Deny, "|", dl, interp))
		}
	}
	rules = append(rules,
		d(Ask, "git", "**", "push", "**", "--forc*"), // git takes a long option's unique prefix
		d(Ask, "git", "**", "push", "**", "-f*"),
		d(Ask, "git", "**", "push", "**", "-[!-]*f*"),
		d(Ask, "git", "**", "push", "**", "--mir*"),
		d(Ask, "git", "**", "push", "**", "--del*"),
		d(Ask, "git", "**", "push", "**", "-d*"),
		d(Ask, "git", "**", "push", "**", "-[!-]*d*"),
		d(Ask, "git", "**", "push", "**", `+*`),
		d(Ask, "git", "**", "push", "**", `:*`),
		d(Ask, "git", "reset", "--hard", "**"),
		d(Ask, "git", "clean", "**", "-*f*"),
		d(Deny, "dd", "**", "of=/dev/*"),
		d(Deny, "mkfs*"),
		d(Deny, "mke2fs"),
		d(Deny, "mkswap"),
		d(Deny, "wipefs"),
		d(Deny, "fdisk"),
		d(Deny, "sfdisk"),
		d(Deny, "parted"),
		d(Deny, "shred", "**", "/dev/*"),
		d(Deny, "chmod", "**", "777", "/"),
		d(Deny, "chmod", "**", "-R", "**", "/"),
		d(Deny, "chown", "**", "-R", "**", "/"),
		d(Deny, "shutdown"),
		d(Deny, "reboot"),
		d(Deny, "poweroff"),
		d(Deny, "halt"),
		d(Deny, "init", "0"),
		d(Deny, "init", "6"),
		d(Deny, "systemctl", "poweroff"),
		d(Deny, "systemctl", "reboot"),
		d(Deny, "systemctl", "halt"),
		d(Ask, "find", "**", "-delete"),
		d(Ask, "sudo"),
		d(Ask, "doas"),
		d(Ask, "su"),
		d(Ask, "pkexec"),
	)
	for _, dev := range []string{"/dev/sd*", "/dev/hd*", "/dev/vd*", "/dev/xvd*", "/dev/nvme*", "/dev/mmcblk*", "/dev/dm-*", "/dev/md*", "/dev/loop*", "/dev/mapper/*", "/dev/disk/*", "/dev/mem", "/dev/kmem", "/dev/port"} {
		rules = append(rules, d(Deny, ">", dev), d(Deny, "dd", "**", "of="+dev), d(Deny, "tee", "**", dev), d(Deny, "cp", "**", dev))
	}
	return rules
}

// readOnlyCommands are harmless commands that only read, allowed by every
// preset but "none". Their options that write or run something are asked
// by readOnlyAsks.
func readOnlyCommands() [][]string {
	return [][]string{
		{"ls"}, {"cat"}, {"head"}, {"tail"}, {"wc"}, {"grep"}, {"egrep"}, {"fgrep"}, {"rg"}, {"ag"},
		{"pwd"}, {"echo"}, {"printf"}, {"true"}, {"false"}, {"test"}, {"["}, {"which"}, {"type"},
		{"command", "-v"}, {"command", "-V"}, {"whoami"}, {"id"}, {"uname"}, {"date"}, {"hostname"}, {"env"}, {"printenv"},
		{"file"}, {"stat"}, {"du"}, {"df"}, {"tree"}, {"less"}, {"more"}, {"basename"}, {"dirname"},
		{"realpath"}, {"readlink"}, {"diff"}, {"cmp"}, {"comm"}, {"cut"}, {"sort"}, {"uniq"}, {"tr"},
		{"nl"}, {"od"}, {"xxd"}, {"hexdump"}, {"column"}, {"jq"}, {"yq"}, {"md5sum"}, {"sha1sum"},
		{"sha256sum"}, {"sha512sum"}, {"cksum"}, {"seq"}, {"sleep"}, {"fd"}, {"find"}, {"ps"}, {"uptime"},
		{"git", "status"}, {"git", "log"}, {"git", "diff"}, {"git", "show"}, {"git", "blame"},
		{"git", "branch", "--list"}, {"git", "rev-parse"}, {"git", "ls-files"}, {"git", "grep"},
		{"git", "remote", "-v"}, {"git", "describe"}, {"git", "shortlog"}, {"git", "tag", "--list"},
		{"go", "version"}, {"go", "env"}, {"go", "list"}, {"go", "doc"}, {"go", "vet"},
		{"node", "--version"}, {"python3", "--version"}, {"python", "--version"},
	}
}

// readOnlyAsks are the options of allowed read-only commands that write
// or run something: asked, since ask wins over allow.
func readOnlyAsks() [][]string {
	return [][]string{
		{"find", "**", "-exec*"}, {"find", "**", "-ok*"}, {"find", "**", "-fprint*"}, {"find", "**", "-fls"},
		{"rg", "**", "--pre"}, {"rg", "**", "--pre=*"}, {"sort", "**", "-o"}, {"sort", "**", "--output*"},
		{"git", "diff", "**", "--output*"}, {"git", "log", "**", "--output*"}, {"git", "show", "**", "--output*"},
		{"fd", "**", "-x"}, {"fd", "**", "-X"}, {"fd", "**", "--exec*"},
	}
}

// workspaceCommands are the day-to-day commands of building and editing
// a project, allowed by workspace-write (and full).
func workspaceCommands() [][]string {
	return [][]string{
		{"mkdir"}, {"touch"}, {"cp"}, {"mv"}, {"ln"}, {"sed"}, {"awk"}, {"patch"}, {"tee"},
		{"make"}, {"go", "build"}, {"go", "test"}, {"go", "run"}, {"go", "fmt"}, {"go", "mod", "tidy"}, {"gofmt"},
		{"cargo", "build"}, {"cargo", "test"}, {"cargo", "check"}, {"cargo", "fmt"}, {"cargo", "clippy"},
		{"npm", "test"}, {"npm", "run"}, {"npm", "ci"}, {"npm", "install"}, {"npx"}, {"pnpm"}, {"yarn"},
		{"pytest"}, {"python3"}, {"python"}, {"pip", "install"}, {"node"}, {"tsc"}, {"eslint"}, {"prettier"},
		{"git", "add"}, {"git", "commit"}, {"git", "checkout"}, {"git", "switch"}, {"git", "branch"},
		{"git", "stash"}, {"git", "restore"}, {"git", "merge"}, {"git", "rebase"}, {"git", "fetch"}, {"git", "pull"},
		{"git", "tag"}, {"git", "mv"}, {"git", "rm"}, {"git", "init"}, {"git", "clone"}, {"rm"}, {"rmdir"},
		{"chmod"}, {"tar"}, {"unzip"}, {"gzip"}, {"gunzip"},
	}
}

// PresetRules are the rules of a preset and the default it sets: read-only
// allows the harmless read-only commands (default ask), workspace-write
// those and the commands of building and editing a project (default
// ask), full allows everything the default rules do not stop (default
// allow), none has no rules (default ask).
func PresetRules(name string) ([]Rule, Action, error) {
	src := sourcePreset + name
	list := func(a Action, pats [][]string) []Rule {
		out := make([]Rule, len(pats))
		for i, p := range pats {
			out[i] = Rule{Action: a, Pattern: p, Source: src}
		}
		return out
	}
	switch name {
	case PresetNone:
		return nil, Ask, nil
	case PresetReadOnly, "":
		src = sourcePreset + PresetReadOnly
		return append(list(Allow, readOnlyCommands()), list(Ask, readOnlyAsks())...), Ask, nil
	case PresetWorkspaceWrite:
		r := append(list(Allow, readOnlyCommands()), list(Allow, workspaceCommands())...)
		return append(r, list(Ask, readOnlyAsks())...), Ask, nil
	case PresetFull:
		return nil, Allow, nil
	}
	return nil, 0, fmt.Errorf("unknown preset %q: want one of read-only, workspace-write, full, none", name)
}

// Config is what a policy says about command approvals.
type Config struct {
	// Preset names the preset (Presets); "" is read-only.
	Preset string
	// Default, when not "", overrides the preset's default action.
	Default string
	// NoDefaultRules drops DefaultRules.
	NoDefaultRules bool
	// Rules are the policy's own rules, checked before the preset's.
	Rules []Rule
	// Approved are simple commands, as Decision.Command shows them, that
	// a person allowed for always: they are allowed where a rule says ask.
	Approved []string
}

// Build compiles a Config: its rules, then the preset's, then the
// default rules.
func Build(c Config) (*Set, error) {
	preset, def, err := PresetRules(c.Preset)
	if err != nil {
		return nil, err
	}
	if c.Default != "" {
		if def, err = ParseAction(c.Default); err != nil {
			return nil, fmt.Errorf("default: %w", err)
		}
	}
	rules := append(append([]Rule(nil), c.Rules...), preset...)
	if !c.NoDefaultRules {
		rules = append(rules, DefaultRules()...)
	}
	s, err := NewSet(def, rules)
	if err != nil {
		return nil, err
	}
	for i, a := range c.Approved {
		if err := s.addApproved(a); err != nil {
			return nil, fmt.Errorf("approved[%d]: %w", i, err)
		}
	}
	return s, nil
}
