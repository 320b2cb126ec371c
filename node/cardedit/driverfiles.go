package cardedit

import (
	"bufio"
	"bytes"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
)

// driverFile is one name of a driver's file found on the node.
type driverFile struct {
	name string // the name to give it in the container: "libcuda.so.1"
	host string // the regular file it is, links resolved: "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.14"
}

// finder looks for a driver's files in the node's tree under root (all
// paths it returns are on the node, root included).
type finder struct {
	root    string
	libDirs []string // where libraries are looked for, in order (paths in the tree)
	confs   int      // ld.so.conf files read so far
}

// maxConfFiles bounds the ld.so.conf files read (includes of includes).
const maxConfFiles = 256

// programDirs are where a driver's programs are looked for, in order.
var programDirs = []string{"/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin", "/bin", "/sbin"}

// newFinder reads the library directories of the tree: those of
// /etc/ld.so.conf (and what it includes), then the standard ones of this
// architecture.
func newFinder(root string) *finder {
	f := &finder{root: root}
	seen := map[string]bool{}
	add := func(d string) {
		d = path.Clean(d)
		if path.IsAbs(d) && !seen[d] {
			seen[d] = true
			f.libDirs = append(f.libDirs, d)
		}
	}
	for _, d := range f.ldConfDirs("/etc/ld.so.conf", 0) {
		add(d)
	}
	var std []string
	if t := multiarch(); t != "" {
		std = append(std, "/lib/"+t, "/usr/lib/"+t)
	}
	for _, d := range append(std, "/lib64", "/usr/lib64", "/lib", "/usr/lib") {
		add(d)
	}
	return f
}

// multiarch is Debian's directory name for this architecture's libraries.
func multiarch() string {
	switch runtime.GOARCH {
	case "amd64":
		return "x86_64-linux-gnu"
	case "arm64":
		return "aarch64-linux-gnu"
	}
	return ""
}

// ldConfDirs reads the directories an ld.so.conf file names, following
// its include lines (glob patterns, relative to the file's directory),
// at most 8 deep and maxConfFiles in all.
func (f *finder) ldConfDirs(file string, depth int) []string {
	if depth > 8 || f.confs >= maxConfFiles {
		return nil
	}
	f.confs++
	b, err := os.ReadFile(f.inTree(file))
	if err != nil {
		return nil
	}
	var dirs []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		switch {
		case len(fields) == 0, fields[0] == "hwcap":
		case fields[0] == "include":
			for _, pat := range fields[1:] {
				if !path.IsAbs(pat) {
					pat = path.Join(path.Dir(file), pat)
				}
				matches, _ := filepath.Glob(f.inTree(pat))
				sort.Strings(matches)
				for _, m := range matches {
					if rel, ok := f.fromTree(m); ok {
						dirs = append(dirs, f.ldConfDirs(rel, depth+1)...)
					}
				}
			}
		default:
			for _, d := range strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' || r == ',' || r == ':' }) {
				d, _, _ = strings.Cut(d, "=") // a legacy "dir=libc5"
				dirs = append(dirs, d)
			}
		}
	}
	return dirs
}

// inTree is where path p of the tree is on the node (no links followed).
func (f *finder) inTree(p string) string {
	return filepath.Join(f.root, p)
}

// fromTree is the path in the tree of a path on the node under root.
func (f *finder) fromTree(host string) (string, bool) {
	rel, err := filepath.Rel(f.root, host)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return "/" + filepath.ToSlash(rel), true
}

// resolve follows the links of path p of the tree without leaving it and
// returns where it ends up on the node, and what it is.
func (f *finder) resolve(p string) (string, os.FileInfo, error) {
	host, err := securejoin.SecureJoin(f.root, p)
	if err != nil {
		return "", nil, err
	}
	fi, err := os.Stat(host)
	if err != nil {
		return "", nil, err
	}
	return host, fi, nil
}

// libraries returns every name of the libraries called base ("libcuda.so":
// libcuda.so, libcuda.so.1, libcuda.so.550.54.14) in the first library
// directory (extra ones first) that holds one, each with the regular file
// it is. With a version, only files whose resolved name ends with it are
// taken (a driver's libraries name its version; older ones left on the
// node are not).
func (f *finder) libraries(base string, extra []string, version string) []driverFile {
	for _, dir := range append(append([]string(nil), extra...), f.libDirs...) {
		entries, err := os.ReadDir(f.inTree(dir))
		if err != nil {
			continue
		}
		var out []driverFile
		for _, e := range entries {
			name := e.Name()
			if name != base && !strings.HasPrefix(name, base+".") {
				continue
			}
			host, fi, err := f.resolve(path.Join(dir, name))
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			if version != "" && !strings.HasSuffix(filepath.Base(host), "."+version) {
				continue
			}
			out = append(out, driverFile{name: name, host: host})
		}
		if len(out) > 0 {
			return out
		}
	}
	return nil
}

// program returns the driver program called name in the program
// directories, if there is one that can be run.
func (f *finder) program(name string) (driverFile, bool) {
	for _, dir := range programDirs {
		host, fi, err := f.resolve(path.Join(dir, name))
		if err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return driverFile{name: name, host: host}, true
		}
	}
	return driverFile{}, false
}

// exists returns where path p of the tree is on the node, links resolved,
// if it is there.
func (f *finder) exists(p string) (string, bool) {
	host, _, err := f.resolve(p)
	return host, err == nil
}
