//go:build linux

package main

import (
	"slices"
	"testing"
)

func TestParseCommands(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    []command
		wantErr bool
	}{
		{
			name: "plain and with a directory",
			args: []string{"a=/bin/true x {id}", "b@/tmp/w=true"},
			want: []command{
				{name: "a", dir: "/ws", argv: []string{"/bin/true", "x", "{id}"}},
				{name: "b", dir: "/tmp/w"},
			},
		},
		{name: "no commands", wantErr: true},
		{name: "no name", args: []string{"=/bin/true"}, wantErr: true},
		{name: "no command line", args: []string{"a=  "}, wantErr: true},
		{name: "empty directory", args: []string{"a@=/bin/true"}, wantErr: true},
		{name: "twice", args: []string{"a=/bin/true", "a=/bin/true"}, wantErr: true},
		{name: "not found", args: []string{"a=/no/such/binary"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseCommands(tt.args, "/ws")
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d commands, want %d", len(got), len(tt.want))
			}
			for i, c := range got {
				w := tt.want[i]
				if c.name != w.name || c.dir != w.dir {
					t.Errorf("command %d = %q in %q, want %q in %q", i, c.name, c.dir, w.name, w.dir)
				}
				if w.argv != nil && !slices.Equal(c.argv, w.argv) {
					t.Errorf("command %d argv = %q, want %q", i, c.argv, w.argv)
				}
			}
		})
	}
}

func TestParseRatios(t *testing.T) {
	cmds := []command{{name: "hutch"}, {name: "bwrap"}}
	got, err := parseRatios("hutch/bwrap, hutch/runsc,,", cmds)
	if err != nil {
		t.Fatal(err)
	}
	if want := [][2]string{{"hutch", "bwrap"}}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q (pairs naming a missing command are left out)", got, want)
	}
	if _, err := parseRatios("hutch", cmds); err == nil {
		t.Error("a pair without / was accepted")
	}
}

func TestRatioRowFloor(t *testing.T) {
	o := options{workers: 4, rssRuns: 10}
	a := result{name: "a", median: 2, p90: 2, cpu: 2, rss: 5000, floor: 2500, seqPerSec: 1, parPerSec: 1}
	b := result{name: "b", median: 1, p90: 1, cpu: 1, rss: 2400, floor: 2500, seqPerSec: 2, parPerSec: 2}
	row := ratioRow(o, a, b)
	if want := []string{"a/b", "2.00", "2.00", "2.00", "≥2.00", "0.50", "0.50"}; !slices.Equal(row, want) {
		t.Errorf("row = %q, want %q", row, want)
	}
	if got := rssCell(o, b); got != "≤2.4" {
		t.Errorf("rss cell at the floor = %q, want ≤2.4", got)
	}
}
