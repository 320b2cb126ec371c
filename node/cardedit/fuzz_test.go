package cardedit

import (
	"os"
	"path"
	"path/filepath"
	"testing"
)

// Any ld.so.conf — includes of itself, globs, junk — yields absolute
// library directories, each once, and ends.
func FuzzLdConf(f *testing.F) {
	f.Add("include /etc/ld.so.conf.d/*.conf\n/usr/local/lib\n")
	f.Add("include ld.so.conf\n/opt/a, /opt/b:/opt/c=libc5 # comment\nhwcap 0 nosegneg\n")
	f.Add("include /etc/ld.so.conf\n\x00relative/dir\n")
	f.Fuzz(func(t *testing.T, conf string) {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "etc/ld.so.conf.d"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"etc/ld.so.conf", "etc/ld.so.conf.d/a.conf"} {
			if err := os.WriteFile(filepath.Join(root, p), []byte(conf), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		seen := map[string]bool{}
		for _, d := range newFinder(root).libDirs {
			if !path.IsAbs(d) || path.Clean(d) != d || seen[d] {
				t.Fatalf("library directory %q of %q", d, conf)
			}
			seen[d] = true
		}
	})
}

// Any /proc/driver/nvidia/version gives a version of digits and dots, or
// none.
func FuzzNVIDIAVersion(f *testing.F) {
	f.Add("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n")
	f.Add("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.104.05  Release Build  (dvs-builder@U16-I3-B03-4-3)\n")
	f.Fuzz(func(t *testing.T, s string) {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "proc/driver/nvidia"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "proc/driver/nvidia/version"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		v := nvidiaVersion(&finder{root: root})
		for _, r := range v {
			if (r < '0' || r > '9') && r != '.' {
				t.Fatalf("version %q of %q", v, s)
			}
		}
	})
}
