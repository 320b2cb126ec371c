package executor

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// StartFailedPrefix starts the line StartFailed writes to an attempt's
// standard error.
const StartFailedPrefix = "gpumesh: the attempt did not start: "

// StartFailed records why an attempt did not start where its owner reads
// its output (ReadLog, `gpumesh logs ID --stderr`): the attempt's
// directory gets an empty stdout log and a stderr log of one line,
// StartFailedPrefix and why (made one line). The node calls it when Start
// returned an error, or when it could not prepare the attempt at all (its
// payload could not be fetched), so that a failed start never leaves the
// owner empty logs. It refuses an attempt that is running.
func (e *Executor) StartFailed(a Attempt, why string) error {
	if !jobIDPattern.MatchString(a.JobID) || a.Share < 0 {
		return fmt.Errorf("executor: attempt of job %q share %d: not a valid attempt", a.JobID, a.Share)
	}
	e.mu.Lock()
	_, running := e.runs[a.Name()]
	e.mu.Unlock()
	if running {
		return fmt.Errorf("executor: attempt %s is running", a.Name())
	}
	dir := filepath.Join(e.cfg.Root, a.Name())
	if err := os.MkdirAll(dir, attemptDirPerm); err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	line := StartFailedPrefix + strings.Join(strings.Fields(why), " ") + "\n"
	for name, data := range map[string]string{stdoutFileName: "", stderrFileName: line} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), attemptFilePerm); err != nil {
			return fmt.Errorf("executor: %w", err)
		}
	}
	return nil
}
