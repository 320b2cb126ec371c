// Package procstat reads what a process has used so far — CPU time, its
// waited-for children's CPU time, resident memory — from /proc on Linux.
// Elsewhere Read returns errors.ErrUnsupported.
//
//	before, err := procstat.Read(pid)
//	... work ...
//	after, _ := procstat.Read(pid)
//	cpu := after.CPU - before.CPU
package procstat

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Usage is a process's use of the machine since it started.
type Usage struct {
	// CPU is its user and system time (utime + stime).
	CPU time.Duration
	// Children is the user and system time of its children that it has
	// waited for (cutime + cstime): the jobs a node ran and reaped.
	Children time.Duration
	// RSS is its resident set size in bytes now (VmRSS).
	RSS int64
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go supports (the kernel fixes it for user space
// whatever CONFIG_HZ is).
const clockTicks = 100

// parseStat reads utime, stime, cutime and cstime from the text of
// /proc/PID/stat. The command name may hold spaces and parentheses, so
// the fields are counted after its last ')'.
func parseStat(text string) (cpu, children time.Duration, err error) {
	i := strings.LastIndexByte(text, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("procstat: stat without a command name: %.40q", text)
	}
	f := strings.Fields(text[i+1:])
	// After the name: state(3) ppid pgrp session tty_nr tpgid flags minflt
	// cminflt majflt cmajflt utime(14) stime cutime cstime(17): f[11..14].
	if len(f) < 15 {
		return 0, 0, fmt.Errorf("procstat: stat with %d fields after the command name, want 15 or more", len(f))
	}
	var t [4]int64
	for k := range t {
		v, err := strconv.ParseInt(f[11+k], 10, 64)
		if err != nil || v < 0 || v > 1<<40 { // 2^40 ticks: 348 years
			return 0, 0, fmt.Errorf("procstat: stat field %d: %q is no tick count", 14+k, f[11+k])
		}
		t[k] = v
	}
	tick := time.Second / clockTicks
	return time.Duration(t[0]+t[1]) * tick, time.Duration(t[2]+t[3]) * tick, nil
}

// parseRSS reads VmRSS from the text of /proc/PID/status, in bytes; 0 for
// a process that has none (a zombie).
func parseRSS(text string) (int64, error) {
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("procstat: VmRSS line %q: want \"N kB\"", line)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 {
			return 0, fmt.Errorf("procstat: VmRSS line %q: %q is no count of kB", line, f[0])
		}
		return kb << 10, nil
	}
	return 0, nil
}
