package ociruntime

import (
	"fmt"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// gVisor reads annotations of a container's configuration that change
// what runsc does on the host: flags (dev.gvisor.flag.NAME, some without
// --allow-flag-override), bundles of flags (dev.gvisor.bundle.NAME), a
// root file system or its upper layer from a host file
// (dev.gvisor.spec.rootfs.*, dev.gvisor.tar.rootfs.upper*), a restore
// from a host file and devices of the host (dev.gvisor.internal.*), the
// sandbox's cgroup (dev.gvisor.spec.cgroup-parent). They are the
// container creator's words, as hutch's dev.hutch.* are, and the creator
// is not the node's operator: hutch-runc takes under the gVisor tier only
// the ones gVisor's containerd shim writes into a pod's bundles and that
// stay inside the sandbox, and refuses the create for any other.
const (
	gvisorPrefix = "dev.gvisor."
	// gvisorMountPrefix starts a mount hint, NAME.FIELD: how a mount
	// of the spec is shared among a pod's containers. A hint applies to
	// the spec's mount of the same source only, inside gVisor's kernel.
	gvisorMountPrefix = gvisorPrefix + "spec.mount."
	// gvisorEmptyDirPrefix is read by gVisor's shim alone, before runsc.
	gvisorEmptyDirPrefix = gvisorPrefix + "empty-dir."
	// gvisorCgroupParent puts a pod's sandbox in the pod's cgroup (the
	// shim derives it from the pause container's cgroups path).
	gvisorCgroupParent = gvisorPrefix + "spec.cgroup-parent"
)

// gvisorMountFields are the fields of a mount hint.
var gvisorMountFields = map[string]bool{"source": true, "type": true, "share": true, "options": true, "directfs": true}

// checkGVisorAnnotations refuses s's gVisor annotations other than mount
// hints, the shim's empty-dir settings, and a cgroup parent that is the
// pod's cgroup of s's own cgroups path.
func checkGVisorAnnotations(s *specs.Spec) error {
	for k, v := range s.Annotations {
		if !strings.HasPrefix(k, gvisorPrefix) {
			continue
		}
		switch {
		case strings.HasPrefix(k, gvisorMountPrefix):
			name, field, ok := strings.Cut(strings.TrimPrefix(k, gvisorMountPrefix), ".")
			if !ok || name == "" || !gvisorMountFields[field] {
				return fmt.Errorf("%w: annotation %s: not a gVisor mount hint (dev.gvisor.spec.mount.NAME.source, type, share, options or directfs)", ErrBadSpec, k)
			}
			continue
		case strings.HasPrefix(k, gvisorEmptyDirPrefix):
			continue
		case k == gvisorCgroupParent:
			if want, ok := podCgroup(s); ok && v == want {
				continue
			}
			return fmt.Errorf("%w: annotation %s: %q is not the pod's cgroup of the container's cgroups path", ErrBadSpec, k, v)
		}
		return fmt.Errorf("%w: annotation %s: hutch-runc takes no annotation of gVisor's that changes runsc's configuration or reaches the host's files (only mount hints, dev.gvisor.spec.mount.*)", ErrBadSpec, k)
	}
	return nil
}

// podCgroup is the cgroup of the pod of s's cgroups path: the path up to
// its last element that starts with "pod" (/kubepods/burstable/podUID of
// /kubepods/burstable/podUID/ID), as gVisor's shim finds it for a pod's
// sandbox; ok is false when there is none or it is the path itself.
func podCgroup(s *specs.Spec) (string, bool) {
	if s.Linux == nil || s.Linux.CgroupsPath == "" {
		return "", false
	}
	p := s.Linux.CgroupsPath
	parts := strings.Split(p, "/")
	for i := len(parts) - 1; i >= 0; i-- {
		if !strings.HasPrefix(parts[i], "pod") {
			continue
		}
		out := filepath.Join(parts[:i+1]...)
		if filepath.IsAbs(p) {
			out = "/" + out
		}
		return out, out != p
	}
	return "", false
}
