//go:build linux

package procstat

import (
	"fmt"
	"os"
	"strconv"
)

// Read returns what process pid has used so far.
func Read(pid int) (Usage, error) {
	dir := "/proc/" + strconv.Itoa(pid)
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return Usage{}, fmt.Errorf("procstat: %w", err)
	}
	cpu, children, err := parseStat(string(stat))
	if err != nil {
		return Usage{}, fmt.Errorf("procstat: pid %d: %w", pid, err)
	}
	status, err := os.ReadFile(dir + "/status")
	if err != nil {
		return Usage{}, fmt.Errorf("procstat: %w", err)
	}
	rss, err := parseRSS(string(status))
	if err != nil {
		return Usage{}, fmt.Errorf("procstat: pid %d: %w", pid, err)
	}
	return Usage{CPU: cpu, Children: children, RSS: rss}, nil
}
