package mcp

import (
	"testing"

	"github.com/hutch-sandbox/hutch/internal/approve"
)

func TestElicitMessage(t *testing.T) {
	for _, tc := range []struct {
		r    approve.Request
		want string
	}{
		{approve.Request{Kind: approve.KindCommand, Subject: "git push && echo done", Command: "git push", Rule: "ask: [git, push] (p.yaml:3)", Reason: "it publishes", Sandbox: "sb1"},
			"Run this command in sandbox sb1?\n\ngit push && echo done\n\nasked about: git push\nrule: ask: [git, push] (p.yaml:3)\nreason: it publishes"},
		{approve.Request{Kind: approve.KindCommand, Subject: "make", Command: "make", Reason: "no rule allows it"},
			"Run this command?\n\nmake\nreason: no rule allows it"},
		{approve.Request{Kind: approve.KindNetwork, Subject: "example.com:443", Rule: "network.on_unknown: ask", Reason: "no network rule allows it", Sandbox: "sb2"},
			"Let sandbox sb2 connect to example.com:443?\nrule: network.on_unknown: ask\nreason: no network rule allows it"},
		{approve.Request{Kind: approve.KindFile, Subject: ".github/ci.yml\nMakefile", Rule: "ask: [.github/**]"},
			"Apply changes to these paths?\n\n.github/ci.yml\nMakefile\nrule: ask: [.github/**]"},
	} {
		if got := elicitMessage(tc.r); got != tc.want {
			t.Errorf("%+v:\n got %q\nwant %q", tc.r, got, tc.want)
		}
	}
}
