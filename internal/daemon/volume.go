package daemon

import (
	"encoding/json"
	"fmt"

	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// MaxVolumes is how many volumes a sandbox may have; MaxVolumeName bounds
// a volume's name, in bytes.
const (
	MaxVolumes    = sandbox.MaxVolumes
	MaxVolumeName = 256
)

// checkVolumes checks a create's volumes for a sandbox whose workspace is
// ws (CreateRequest.Volumes, sandbox.CheckVolumes): an error of category
// ErrInvalid names the volume and the problem.
func checkVolumes(vols []Volume, ws string) error {
	if len(vols) > MaxVolumes {
		return invalid("create sandbox: volumes: %d volumes, at most %d allowed", len(vols), MaxVolumes)
	}
	for i, v := range vols {
		switch {
		case v.Name == "":
			return invalid("create sandbox: volumes[%d]: no name", i)
		case len(v.Name) > MaxVolumeName:
			return invalid("create sandbox: volumes[%d]: name %.32q… is longer than %d bytes", i, v.Name, MaxVolumeName)
		case !policy.Printable(v.Name):
			return invalid("create sandbox: volumes[%d]: name %q is not printable UTF-8", i, v.Name)
		}
	}
	// sandbox.CheckVolumes names a volume by its index; the message names
	// it by its name too.
	for i := range vols {
		if err := sandbox.CheckVolumes(toSandboxVolumes(vols[:i+1]), ws); err != nil {
			return invalid("create sandbox: volumes[%d] (%q): %v", i, vols[i].Name, trimIndex(err, i))
		}
	}
	return nil
}

// trimIndex is err's message without the "volume i: " sandbox.CheckVolumes
// starts it with.
func trimIndex(err error, i int) string {
	msg := err.Error()
	prefix := fmt.Sprintf("volume %d: ", i)
	if len(msg) > len(prefix) && msg[:len(prefix)] == prefix {
		return msg[len(prefix):]
	}
	return msg
}

// toSandboxVolumes is vols as the tiers take them.
func toSandboxVolumes(vols []Volume) []sandbox.Volume {
	if len(vols) == 0 {
		return nil
	}
	out := make([]sandbox.Volume, len(vols))
	for i, v := range vols {
		out[i] = sandbox.Volume{Dir: v.Dir, At: v.At}
	}
	return out
}

// encodeVolumes is vols as a sandbox's record keeps them (nil for none).
func encodeVolumes(vols []Volume) ([]byte, error) {
	if len(vols) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(vols)
	if err != nil {
		return nil, fmt.Errorf("encode volumes: %w", err)
	}
	return b, nil
}

// decodeVolumes reads the volumes a sandbox's record keeps.
func decodeVolumes(b []byte) ([]Volume, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var vols []Volume
	if err := json.Unmarshal(b, &vols); err != nil {
		return nil, fmt.Errorf("its volumes: %w", err)
	}
	return vols, nil
}
