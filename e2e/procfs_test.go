//go:build unix

package e2e

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// What the chaos suite learns about processes from /proc: which groups a
// node's jobs run in (each job runs in a process group of its own, so
// killing the node's group leaves them running), whether a group still
// has a process, and which processes of a test's jobs are still alive.

// procStat is the part of /proc/PID/stat the suite reads.
type procStat struct {
	pid, ppid, pgrp int
	state           byte // R, S, D, T (stopped), Z (zombie), ...
}

// readStat parses /proc/PID/stat; the command name may hold spaces and
// parentheses, so the fields are read after its last ')'.
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 || len(f[0]) != 1 {
		return procStat{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return procStat{}, false
	}
	return procStat{pid: pid, ppid: ppid, pgrp: pgrp, state: f[0][0]}, true
}

// allPids lists the processes of the host (of this PID namespace).
func allPids() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// childGroups returns the process groups of pid's children other than
// pid's own group: the groups its jobs run in.
func childGroups(pid int) []int {
	own, _ := readStat(pid)
	seen := map[int]bool{}
	var out []int
	for _, p := range allPids() {
		st, ok := readStat(p)
		if !ok || st.ppid != pid || st.pgrp == own.pgrp || seen[st.pgrp] {
			continue
		}
		seen[st.pgrp] = true
		out = append(out, st.pgrp)
	}
	return out
}

// groupAlive reports whether process group pgid has a process that is not
// a zombie. (A zombie has ended; only its parent's wait is missing.)
func groupAlive(pgid int) bool {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	for _, p := range allPids() {
		if st, ok := readStat(p); ok && st.pgrp == pgid && st.state != 'Z' {
			return true
		}
	}
	return false
}

// jobProc is a process of a test's jobs and its environment.
type jobProc struct {
	procStat
	env map[string]string
}

// jobProcs returns the processes alive now, zombies aside, whose
// environment holds name=value: with the chaos suite's marker variable,
// every process any attempt of a test started, however it was orphaned.
func jobProcs(name, value string) []jobProc {
	want := []byte("\x00" + name + "=" + value + "\x00")
	var out []jobProc
	for _, p := range allPids() {
		env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p), "environ"))
		if err != nil || !bytes.Contains(append([]byte{0}, env...), want) {
			continue
		}
		st, ok := readStat(p)
		if !ok || st.state == 'Z' {
			continue
		}
		jp := jobProc{procStat: st, env: map[string]string{}}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if k, v, ok := strings.Cut(string(kv), "="); ok {
				jp.env[k] = v
			}
		}
		out = append(out, jp)
	}
	return out
}
