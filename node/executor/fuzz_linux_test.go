package executor

import (
	"fmt"
	"strings"
	"testing"
)

// FuzzParseMountInfo: any line parses without panic, and a mount point
// written the way the kernel escapes it reads back unchanged.
func FuzzParseMountInfo(f *testing.F) {
	f.Add("36 35 98:0 /mnt1 /mnt/with\\040space rw,noatime master:1 - ext3 /dev/root rw,errors=continue", "/a b", "rw,nosuid")
	f.Add("25 1 0:22 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory", "/x", "ro")
	f.Add("- - -", "", "")
	f.Fuzz(func(t *testing.T, line, point, opts string) {
		parseMountInfo(line)
		unescapeMount(line)
		if point == "" || strings.ContainsAny(opts, " \t\n") || opts == "" || strings.ContainsRune(point, '\\') {
			return
		}
		esc := strings.NewReplacer(" ", `\040`, "\t", `\011`, "\n", `\012`).Replace(point)
		m, ok := parseMountInfo(fmt.Sprintf("1 2 0:1 / %s %s shared:1 - tmpfs none rw", esc, opts))
		if !ok || m.point != point || m.opts != opts || m.fstype != "tmpfs" {
			t.Fatalf("point %q opts %q parsed as %+v, %v", point, opts, m, ok)
		}
	})
}

// FuzzParseSubordinate: ranges read from /etc/subuid are never inverted.
func FuzzParseSubordinate(f *testing.F) {
	f.Add([]byte("alice:100000:65536\nbob:165536:65536\n"))
	f.Add([]byte("x:4294967295:2\n::\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, r := range parseSubordinate(data) {
			if r[0] > r[1] {
				t.Fatalf("range %v is inverted", r)
			}
		}
	})
}
