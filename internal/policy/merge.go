package policy

import (
	"fmt"
	"reflect"
)

// Add adds what more says to s, as hutch run does with the files of
// --claude-settings and --approve-rules on top of --policy or
// --srt-settings: the lists of paths, hosts and approval rules of more
// are appended to s's; a setting more gives (an approvals preset or
// default, network.on_unknown) replaces s's. Nothing of s is taken away,
// and a deny of either stays a deny.
func (s *Spec) Add(more Spec) {
	fs, mfs := &s.Filesystem, more.Filesystem
	fs.AllowWrite = append(fs.AllowWrite, mfs.AllowWrite...)
	fs.DenyRead = append(fs.DenyRead, mfs.DenyRead...)
	fs.AllowRead = append(fs.AllowRead, mfs.AllowRead...)
	fs.DenyWrite = append(fs.DenyWrite, mfs.DenyWrite...)
	nw, mnw := &s.Network, more.Network
	nw.AllowedDomains = append(nw.AllowedDomains, mnw.AllowedDomains...)
	nw.DeniedDomains = append(nw.DeniedDomains, mnw.DeniedDomains...)
	nw.AllowedCIDRs = append(nw.AllowedCIDRs, mnw.AllowedCIDRs...)
	nw.AllowPrivate = append(nw.AllowPrivate, mnw.AllowPrivate...)
	nw.PrivateNames = append(nw.PrivateNames, mnw.PrivateNames...)
	nw.Hosts = append(nw.Hosts, mnw.Hosts...)
	if mnw.OnUnknown != "" {
		nw.OnUnknown = mnw.OnUnknown
	}
	s.Approvals.Add(more.Approvals)
}

// Add adds the approvals of more to a: its rules and approved commands
// after a's; its default and preset, when it sets them, instead of a's;
// no_default_rules when either says so.
func (a *Approvals) Add(more Approvals) {
	if more.Default != "" {
		a.Default = more.Default
	}
	if more.Preset != "" {
		a.Preset = more.Preset
	}
	a.NoDefaultRules = a.NoDefaultRules || more.NoDefaultRules
	a.Commands = append(a.Commands, more.Commands...)
	a.Approved = append(a.Approved, more.Approved...)
}

// LoadApprovalRules reads an approval rules file (--approve-rules): a
// policy file that holds only an approvals: section.
func LoadApprovalRules(path string) (Approvals, error) {
	spec, err := Load(path)
	if err != nil {
		return Approvals{}, err
	}
	rest := spec
	rest.Approvals = Approvals{}
	if !reflect.DeepEqual(rest, Spec{}) {
		return Approvals{}, fmt.Errorf("%s: an approval rules file holds only an approvals: section", path)
	}
	return spec.Approvals, nil
}
