package image

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Process is how an image runs a job's command, as `docker run` would:
// the image's entrypoint, then the job's command or else the image's Cmd;
// its environment, working directory and user.
type Process struct {
	Args []string
	// Env is the image's environment (NAME=VALUE); the job's own
	// variables go over it.
	Env []string
	// Cwd is the working directory inside the image ("/" by default).
	Cwd string
	// UID, GID and Groups are the user inside the image.
	UID, GID uint32
	Groups   []uint32
}

// ErrNoCommand is matched when neither the image nor the job names a
// command.
var ErrNoCommand = errors.New("no command: the image has no Entrypoint or Cmd and the job gives none")

// Process returns how img runs command (nil: the image's Cmd) in the root
// file system at rootfs, where a user given by name is looked up in
// /etc/passwd and /etc/group (read through an os.Root: never outside it).
func (img *Image) Process(rootfs string, command []string) (Process, error) {
	cfg := img.Config
	p := Process{Env: cfg.Env, Cwd: cfg.WorkingDir}
	p.Args = append(append([]string{}, cfg.Entrypoint...), cfg.Cmd...)
	if len(command) > 0 {
		p.Args = append(append([]string{}, cfg.Entrypoint...), command...)
	}
	if len(p.Args) == 0 || p.Args[0] == "" {
		return Process{}, ErrNoCommand
	}
	if p.Cwd == "" {
		p.Cwd = "/"
	}
	if !strings.HasPrefix(p.Cwd, "/") {
		p.Cwd = "/" + p.Cwd
	}
	var err error
	if p.UID, p.GID, p.Groups, err = lookupUser(rootfs, cfg.User); err != nil {
		return Process{}, fmt.Errorf("the image's user %q: %w", cfg.User, err)
	}
	return p, nil
}

// lookupUser resolves "", "name", "uid", "name:group", "uid:gid" as
// Docker does: a name must be in the image's /etc/passwd (a group in its
// /etc/group); a number need not be. Ids above 65535 are refused (the
// container's user namespace maps 0-65535).
func lookupUser(rootfs, spec string) (uid, gid uint32, groups []uint32, err error) {
	if spec == "" {
		spec = "0"
	}
	user, group, hasGroup := strings.Cut(spec, ":")
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return 0, 0, nil, err
	}
	defer root.Close()
	passwd := readDB(root, "etc/passwd")
	var name string
	if n, ok := number(user); ok {
		uid, gid = n, n
		for _, e := range passwd {
			if e[2] == user {
				name = e[0]
				if g, ok := number(e[3]); ok {
					gid = g
				}
				break
			}
		}
		if name == "" && !hasGroup {
			gid = 0 // docker: an unknown uid runs with gid 0
		}
	} else {
		found := false
		for _, e := range passwd {
			if e[0] == user {
				u, ok1 := number(e[2])
				g, ok2 := number(e[3])
				if !ok1 || !ok2 {
					return 0, 0, nil, fmt.Errorf("the image's /etc/passwd has a bad entry for %s", user)
				}
				uid, gid, name, found = u, g, user, true
				break
			}
		}
		if !found {
			return 0, 0, nil, fmt.Errorf("no user %q in the image's /etc/passwd", user)
		}
	}
	groupDB := readDB(root, "etc/group")
	if hasGroup {
		if n, ok := number(group); ok {
			gid = n
		} else {
			found := false
			for _, e := range groupDB {
				if e[0] == group {
					if g, ok := number(e[2]); ok {
						gid, found = g, true
					}
					break
				}
			}
			if !found {
				return 0, 0, nil, fmt.Errorf("no group %q in the image's /etc/group", group)
			}
		}
	}
	if name != "" {
		for _, e := range groupDB {
			if len(e) < 4 {
				continue
			}
			for _, member := range strings.Split(e[3], ",") {
				if member == name {
					if g, ok := number(e[2]); ok && g != gid {
						groups = append(groups, g)
					}
				}
			}
		}
	}
	return uid, gid, groups, nil
}

// number reads an id of the container's range.
func number(s string) (uint32, bool) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n > 65535 {
		return 0, false
	}
	return uint32(n), true
}

// readDB reads a colon-separated database (passwd, group), at most 1 MiB
// of it; a missing file is empty.
func readDB(root *os.Root, name string) [][]string {
	f, err := root.Open(name)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, ":")
		if len(fields) >= 4 {
			out = append(out, fields)
		}
	}
	return out
}
