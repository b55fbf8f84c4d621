package cgroups

import (
	"errors"
	"io/fs"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestSettings(t *testing.T) {
	tests := []struct {
		controller string
		v2         bool
		l          Limits
		want       []setting
	}{
		{"cpu", true, Limits{CPUs: 1.5}, []setting{{"cpu.max", "150000 100000", false}}},
		{"cpu", false, Limits{CPUs: 1.5}, []setting{{"cpu.cfs_period_us", "100000", false}, {"cpu.cfs_quota_us", "150000", false}}},
		{"cpu", true, Limits{CPUs: 0.25}, []setting{{"cpu.max", "25000 100000", false}}},
		{"cpu", true, Limits{CPUs: 0.001}, []setting{{"cpu.max", "1000 100000", false}}}, // the kernel's 1ms minimum
		{"cpu", true, Limits{CPUs: 4}, []setting{{"cpu.max", "400000 100000", false}}},
		{"memory", true, Limits{MemoryBytes: 32 << 20}, []setting{{"memory.max", "33554432", false}, {"memory.swap.max", "0", true}}},
		{"memory", false, Limits{MemoryBytes: 32 << 20}, []setting{{"memory.limit_in_bytes", "33554432", false}, {"memory.memsw.limit_in_bytes", "33554432", true}}},
		{"pids", true, Limits{Pids: 20}, []setting{{"pids.max", "20", false}}},
		{"pids", false, Limits{Pids: 20}, []setting{{"pids.max", "20", false}}},
	}
	for _, tt := range tests {
		for _, lim := range limiters {
			if lim.controller != tt.controller {
				continue
			}
			if !lim.needed(tt.l) {
				t.Errorf("%s: not needed for %+v", tt.controller, tt.l)
			}
			if got := lim.settings(tt.l, tt.v2); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("%s v2=%v %+v: got %+v, want %+v", tt.controller, tt.v2, tt.l, got, tt.want)
			}
		}
	}
}

func TestNeeded(t *testing.T) {
	for _, lim := range limiters {
		if lim.needed(Limits{}) {
			t.Errorf("%s needed for zero Limits", lim.controller)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		l       Limits
		wantErr string
	}{
		{Limits{}, ""},
		{Limits{MemoryBytes: 1 << 30, CPUs: 2, Pids: 100}, ""},
		{Limits{MemoryBytes: -1}, "cgroups: memory limit -1: must not be negative"},
		{Limits{Pids: -5}, "cgroups: pids limit -5: must not be negative"},
		{Limits{CPUs: -0.5}, "cgroups: cpu limit -0.5: must be between 0 and 1048576"},
		{Limits{CPUs: math.NaN()}, "cgroups: cpu limit NaN: must be between 0 and 1048576"},
		{Limits{CPUs: math.Inf(1)}, "cgroups: cpu limit +Inf: must be between 0 and 1048576"},
	}
	for _, tt := range tests {
		err := tt.l.Validate()
		if got := errString(err); got != tt.wantErr {
			t.Errorf("%+v: err = %q, want %q", tt.l, got, tt.wantErr)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestParseCounter(t *testing.T) {
	events := "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n"
	tests := []struct {
		text, key string
		want      int64
	}{
		{"33554432\n", "", 33554432},
		{events, "oom_kill", 2},
		{events, "max", 12},
		{events, "absent", 0},
		{"oom_kill_disable 0\nunder_oom 0\noom_kill 1\n", "oom_kill", 1},
		{"max\n", "", 0},
		{"", "", 0},
	}
	for _, tt := range tests {
		if got := parseCounter(tt.text, tt.key); got != tt.want {
			t.Errorf("parseCounter(%q, %q) = %d, want %d", tt.text, tt.key, got, tt.want)
		}
	}
}

func TestSentinels(t *testing.T) {
	if !errors.Is(ErrPermission, ErrNotSupported) {
		t.Error("ErrPermission does not match ErrNotSupported")
	}
	err := tagged{&fs.PathError{Op: "mkdir", Path: "/x", Err: fs.ErrPermission}, ErrPermission}
	if got := err.Error(); got != "mkdir /x: permission denied" || strings.Contains(got, "cgroups not supported") {
		t.Errorf("tagged error prints %q, want the cause alone", got)
	}
	for _, target := range []error{ErrPermission, ErrNotSupported, fs.ErrPermission} {
		if !errors.Is(err, target) {
			t.Errorf("tagged error does not match %v", target)
		}
	}
}
