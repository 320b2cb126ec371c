package portuse

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// holder finds the process holding proto's port: the inode of the
// listening socket (/proc/net/tcp and tcp6, or udp and udp6), then the
// process with a descriptor on it (/proc/PID/fd). It returns 0 when none is
// found: the socket is in another network namespace, or the process is
// another user's and this one may not read its descriptors.
func holder(proto string, port int) (int, string) {
	inodes := map[string]bool{}
	for _, table := range []string{proto, proto + "6"} {
		socketInodes("/proc/net/"+table, proto, port, inodes)
	}
	if len(inodes) == 0 {
		return 0, ""
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, ""
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		dir := "/proc/" + p.Name() + "/fd/"
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			link, err := os.Readlink(dir + fd.Name())
			if err != nil {
				continue
			}
			if inode, ok := strings.CutPrefix(link, "socket:["); ok && inodes[strings.TrimSuffix(inode, "]")] {
				return pid, command(pid)
			}
		}
	}
	return 0, ""
}

// socketInodes adds to inodes the sockets of a /proc/net table that hold
// port: TCP sockets listening on it (state 0A), UDP sockets bound to it.
func socketInodes(path, proto string, port int, inodes map[string]bool) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 {
			continue
		}
		_, hexPort, ok := strings.Cut(fields[1], ":")
		if !ok {
			continue
		}
		p, err := strconv.ParseUint(hexPort, 16, 16)
		if err != nil || int(p) != port || fields[9] == "0" || (proto == "tcp" && fields[3] != "0A") {
			continue
		}
		inodes[fields[9]] = true
	}
}

// command is a process's command line, its arguments joined by spaces
// (its name for a process that has none), control characters as spaces,
// at most 200 bytes.
func command(pid int) string {
	dir := "/proc/" + strconv.Itoa(pid) + "/"
	b, err := os.ReadFile(dir + "cmdline")
	cmd := strings.TrimSpace(strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " "))
	if err != nil || cmd == "" {
		b, _ = os.ReadFile(dir + "comm")
		cmd = strings.TrimSpace(string(b))
	}
	// Another user's process may put anything in its arguments: nothing
	// of it reaches a terminal as a control sequence.
	cmd = strings.Map(func(r rune) rune {
		if r < ' ' || r >= 0x7f && r <= 0x9f {
			return ' '
		}
		return r
	}, cmd)
	if len(cmd) > 200 {
		cmd = strings.ToValidUTF8(cmd[:200], "") + "…"
	}
	return cmd
}
