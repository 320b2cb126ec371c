package executor

import (
	"path"
	"strings"
	"testing"
)

// FuzzLimitsDevices: a device list that validates names only nodes inside
// /dev, never a standard node the sandbox makes itself.
func FuzzLimitsDevices(f *testing.F) {
	for _, s := range []string{"nvidia0", "/dev/nvidiactl", "dri/renderD128", "../etc/shadow", "/dev/../dev/sda", "pts/0", "null", "a\x00b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, d string) {
		if (Limits{Devices: []string{d}}).Validate() != nil {
			return
		}
		name, err := deviceName(d)
		if err != nil {
			t.Fatalf("Validate accepted %q but deviceName refuses it: %v", d, err)
		}
		full := path.Join("/dev", name)
		if !strings.HasPrefix(full, "/dev/") || full != "/dev/"+name || isStandardDevice(name) {
			t.Fatalf("%q is accepted as %q", d, full)
		}
		for _, elem := range strings.Split(name, "/") {
			if elem == ".." || elem == "." || elem == "" {
				t.Fatalf("%q is accepted with path element %q", d, elem)
			}
		}
	})
}
