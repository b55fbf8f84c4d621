package cgroups

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func readLayoutSample(t *testing.T, name, v2ctls string) Info {
	t.Helper()
	mi, err := os.ReadFile(filepath.Join("testdata", name+".mountinfo"))
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile(filepath.Join("testdata", name+".cgroup"))
	if err != nil {
		t.Fatal(err)
	}
	ms, err := parseSelfCgroup(string(self))
	if err != nil {
		t.Fatal(err)
	}
	v2, v1 := ownDirs(parseMountinfo(string(mi)), ms)
	return newInfo(v2, v2ctls, v1)
}

func TestLayout(t *testing.T) {
	const hybridMem = "/sys/fs/cgroup/memory/process_api/37ff0d768fc4adf1f5d7b40514507ee8"
	const desktop = "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/vte-spawn-4242.scope"
	all := Limits{MemoryBytes: 1 << 25, CPUs: 1.5, Pids: 20}
	tests := []struct {
		name      string // testdata/NAME.mountinfo and NAME.cgroup
		v2ctls    string // the caller's v2 cgroup.controllers
		wantInfo  Info
		wantParts []part // for Limits all
	}{{
		name:   "hybrid",
		v2ctls: "hugetlb\n",
		wantInfo: Info{Unified: "/sys/fs/cgroup/unified", Controllers: map[string]Controller{
			"cpu":     {1, "/sys/fs/cgroup/cpu"},
			"cpuacct": {1, "/sys/fs/cgroup/cpuacct"},
			"cpuset":  {1, "/sys/fs/cgroup/cpuset"},
			"memory":  {1, hybridMem},
			"devices": {1, "/sys/fs/cgroup/devices"},
			"freezer": {1, "/sys/fs/cgroup/freezer"},
			"blkio":   {1, "/sys/fs/cgroup/blkio"},
			"pids":    {1, "/sys/fs/cgroup/pids"},
			"hugetlb": {2, "/sys/fs/cgroup/unified"},
		}},
		wantParts: []part{
			{own: "/sys/fs/cgroup/unified", v2: true},
			{own: hybridMem, ctls: []string{"memory"}},
			{own: "/sys/fs/cgroup/cpu", ctls: []string{"cpu"}},
			{own: "/sys/fs/cgroup/pids", ctls: []string{"pids"}},
		},
	}, {
		name:   "v2",
		v2ctls: "cpuset cpu io memory pids\n",
		wantInfo: Info{Unified: desktop, Controllers: map[string]Controller{
			"cpuset": {2, desktop}, "cpu": {2, desktop}, "io": {2, desktop}, "memory": {2, desktop}, "pids": {2, desktop},
		}},
		wantParts: []part{{own: desktop, v2: true, ctls: []string{"memory", "cpu", "pids"}}},
	}, {
		name: "v1",
		wantInfo: Info{Controllers: map[string]Controller{
			"cpu":     {1, "/sys/fs/cgroup/cpu,cpuacct/user.slice"},
			"cpuacct": {1, "/sys/fs/cgroup/cpu,cpuacct/user.slice"},
			"memory":  {1, "/sys/fs/cgroup/memory/user.slice"},
			"pids":    {1, "/sys/fs/cgroup/pids/user.slice/user-1000.slice"},
			"freezer": {1, "/sys/fs/cgroup/freezer"},
		}},
		wantParts: []part{
			{own: "/sys/fs/cgroup/memory/user.slice", ctls: []string{"memory"}},
			{own: "/sys/fs/cgroup/cpu,cpuacct/user.slice", ctls: []string{"cpu"}},
			{own: "/sys/fs/cgroup/pids/user.slice/user-1000.slice", ctls: []string{"pids"}},
		},
	}, {
		name: "container-v1",
		wantInfo: Info{Controllers: map[string]Controller{
			"cpu":     {1, "/sys/fs/cgroup/cpu,cpuacct"},
			"cpuacct": {1, "/sys/fs/cgroup/cpu,cpuacct"},
			"memory":  {1, "/sys/fs/cgroup/memory"},
			"pids":    {1, "/sys/fs/cgroup/pids"},
		}},
		wantParts: []part{
			{own: "/sys/fs/cgroup/memory", ctls: []string{"memory"}},
			{own: "/sys/fs/cgroup/cpu,cpuacct", ctls: []string{"cpu"}},
			{own: "/sys/fs/cgroup/pids", ctls: []string{"pids"}},
		},
	}, {
		name:   "v2-twice",
		v2ctls: "memory pids cpu",
		wantInfo: Info{Unified: "/run/my cgroup/system.slice/hutch.service", Controllers: map[string]Controller{
			"cpu":    {2, "/run/my cgroup/system.slice/hutch.service"},
			"memory": {2, "/run/my cgroup/system.slice/hutch.service"},
			"pids":   {2, "/run/my cgroup/system.slice/hutch.service"},
		}},
		wantParts: []part{{own: "/run/my cgroup/system.slice/hutch.service", v2: true, ctls: []string{"memory", "cpu", "pids"}}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info := readLayoutSample(t, tt.name, tt.v2ctls)
			if !reflect.DeepEqual(info, tt.wantInfo) {
				t.Errorf("info:\n got %+v\nwant %+v", info, tt.wantInfo)
			}
			parts, err := plan(info, all)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(parts, tt.wantParts) {
				t.Errorf("plan:\n got %+v\nwant %+v", parts, tt.wantParts)
			}
			if parts, err := plan(info, Limits{}); err != nil || len(parts) > 1 || len(parts) == 1 && len(parts[0].ctls) > 0 {
				t.Errorf("plan(no limits) = %+v, %v; want at most the v2 directory, with no controller", parts, err)
			}
		})
	}
}

func TestPlanMissingController(t *testing.T) {
	tests := []struct {
		name    string
		info    Info
		l       Limits
		wantErr string
	}{
		{"no cgroups", Info{}, Limits{MemoryBytes: 1}, "cgroups: memory limit: no memory controller (neither cgroup v2 nor v1)"},
		{"cpu not delegated", Info{Unified: "/sys/fs/cgroup/u", Controllers: map[string]Controller{"memory": {2, "/sys/fs/cgroup/u"}}},
			Limits{MemoryBytes: 1, CPUs: 1},
			"cgroups: cpu limit: no cpu controller (not in /sys/fs/cgroup/u/cgroup.controllers, and no cgroup v1 cpu hierarchy)"},
		{"v1 without pids", Info{Controllers: map[string]Controller{"memory": {1, "/m"}}}, Limits{Pids: 5},
			"cgroups: pids limit: no pids controller (neither cgroup v2 nor v1)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := plan(tt.info, tt.l)
			if err == nil || err.Error() != tt.wantErr {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
			if !errors.Is(err, ErrNotSupported) || errors.Is(err, ErrPermission) {
				t.Errorf("err %v: want ErrNotSupported, not ErrPermission", err)
			}
		})
	}
}

func TestParseSelfCgroupErrors(t *testing.T) {
	for _, in := range []string{"garbage\n", "0::relative\n", "4:memory\n"} {
		if _, err := parseSelfCgroup(in); err == nil || !strings.HasPrefix(err.Error(), "cgroups: parse /proc/self/cgroup") {
			t.Errorf("parseSelfCgroup(%q) err = %v, want a parse error", in, err)
		}
	}
}

func TestParseMountinfoSkips(t *testing.T) {
	in := "short line\n" +
		"1 2 0:1 / /a rw - cgroup\n" + // no super options
		"3 2 0:2 / /b rw shared:1 master:2 - cgroup2 cgroup2 rw\n"
	got := parseMountinfo(in)
	want := []mount{{point: "/b", root: "/", v2: true, opts: []string{"rw"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}
