//go:build linux

package main

import (
	"maps"
	"slices"
	"testing"
)

func TestParseTiers(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{in: "namespace", want: []string{"namespace"}},
		{in: "namespace,gvisor", want: []string{"namespace", "gvisor"}},
		{in: "gvisor, namespace", want: []string{"gvisor", "namespace"}},
		{in: "", wantErr: true},
		{in: "namespace,microvm", want: []string{"namespace", "microvm"}},
		{in: "kvm", wantErr: true},
		{in: "gvisor,gvisor", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseTiers(tt.in)
		if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
			t.Errorf("parseTiers(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseIdle(t *testing.T) {
	both := []string{"namespace", "gvisor"}
	tests := []struct {
		in      string
		tiers   []string
		want    map[string]int
		wantErr bool
	}{
		{in: "500,gvisor=20", tiers: both, want: map[string]int{"namespace": 500, "gvisor": 20}},
		{in: "500,gvisor=20", tiers: []string{"namespace"}, want: map[string]int{"namespace": 500}},
		{in: "10", tiers: both, want: map[string]int{"namespace": 10, "gvisor": 10}},
		{in: "0", tiers: both, want: map[string]int{"namespace": 0, "gvisor": 0}},
		{in: "gvisor=5", tiers: both, want: map[string]int{"gvisor": 5}},
		{in: "gvisor=5,3", tiers: both, want: map[string]int{"namespace": 3, "gvisor": 3}},
		{in: "20,microvm=4", tiers: []string{"namespace", "microvm"}, want: map[string]int{"namespace": 20, "microvm": 4}},
		{in: "kvm=5", tiers: both, wantErr: true},
		{in: "-1", tiers: both, wantErr: true},
		{in: "many", tiers: both, wantErr: true},
		{in: "gvisor=", tiers: both, wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseIdle(tt.in, tt.tiers)
		if (err != nil) != tt.wantErr || !tt.wantErr && !maps.Equal(got, tt.want) {
			t.Errorf("parseIdle(%q, %q) = %v, %v; want %v, error %v", tt.in, tt.tiers, got, err, tt.want, tt.wantErr)
		}
	}
}
