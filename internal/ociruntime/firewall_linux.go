package ociruntime

import (
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// firewallTable is the nftables table hutch-runc adds to a container's
// network namespace.
const firewallTable = "hutch"

// egressFirewall installs, in the network namespace ns, a filter on every
// packet the namespace sends: out through its loopback (to hutch's
// proxy, or to its own servers; of 127.0.0.0/8 only 127.0.0.1), as part
// of a connection that came in (answers to a pod's clients, probes), or
// IPv6 neighbour discovery (which answering needs); everything else is
// refused (TCP with a reset, the rest with an ICMP error:
// administratively prohibited), and what a rule misses is dropped. The
// container cannot change it: it holds no CAP_NET_ADMIN, and hutch's
// seccomp table refuses netlink sockets.
//
// With agentPort (AnnotationAgent) it filters what comes in as well: new
// TCP connections to that port (IPv4 and IPv6), and otherwise only what
// the loopback carries, packets of connections the namespace has, and
// IPv6 neighbour discovery; the rest is refused as above. Without it
// whatever comes in is let in: a container's own servers answer.
func egressFirewall(ns, agentPort int) error {
	c, err := nftables.New(nftables.WithNetNSFd(ns))
	if err != nil {
		return err
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: firewallTable})
	drop := nftables.ChainPolicyDrop
	ch := c.AddChain(&nftables.Chain{
		Name: "egress", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &drop,
	})
	rules := [][]expr.Any{
		{
			// The loopback's 127.0.0.0/8 but 127.0.0.1 (where hutch's
			// proxy listens, and the container's own servers): an
			// engine's server there is not the container's (Docker's
			// resolver, 127.0.0.11 on networks of their own, answers
			// the names of the network's containers and forwards the
			// rest to the node's resolvers).
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{127, 0, 0, 1}},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{255, 0, 0, 0}, Xor: []byte{0, 0, 0, 0}},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{127, 0, 0, 0}},
			&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED},
		},
		loopback(expr.MetaKeyOIFNAME),
	}
	for _, exprs := range append(append(rules, inConnection(), neighbourDiscovery()), refuseRest()...) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs})
	}
	if agentPort != 0 {
		in := c.AddChain(&nftables.Chain{
			Name: "ingress", Table: t, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &drop,
		})
		for _, exprs := range append([][]expr.Any{
			loopback(expr.MetaKeyIIFNAME),
			inConnection(),
			neighbourDiscovery(),
			agentPortRule(agentPort),
		}, refuseRest()...) {
			c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: exprs})
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	return nil
}

var accept = &expr.Verdict{Kind: expr.VerdictAccept}

// loopback accepts what goes through lo (key: the packet's out or in
// interface).
func loopback(key expr.MetaKey) []expr.Any {
	lo := make([]byte, unix.IFNAMSIZ)
	copy(lo, "lo")
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: lo},
		accept,
	}
}

// inConnection accepts the packets of a connection conntrack knows
// (established, or related to one: its ICMP errors).
func inConnection() []expr.Any {
	zero := binaryutil.NativeEndian.PutUint32(0)
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED), Xor: zero},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: zero},
		accept,
	}
}

// neighbourDiscovery accepts ICMPv6 router and neighbour solicitation and
// advertisement, and redirect (types 133–137).
func neighbourDiscovery() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_ICMPV6}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: []byte{133}, ToData: []byte{137}},
		accept,
	}
}

// agentPortRule accepts TCP to port (new connections: the packets of
// known ones are accepted before).
func agentPortRule(port int) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(uint16(port))},
		accept,
	}
}

// refuseRest refuses what the rules before did not accept at once rather
// than dropping it: a connection fails as it would without a route (or a
// server), not after a timeout.
func refuseRest() [][]expr.Any {
	return [][]expr.Any{
		{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
			&expr.Reject{Type: unix.NFT_REJECT_TCP_RST},
		},
		{
			&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED},
		},
	}
}
