package executor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"
)

// What an ended attempt leaves under Config.Root, and for how long:
//
//   - its work directory stays (owned by root in sandbox mode) until the
//     node has kept or sent what the job left there (its outputs) and
//     calls Tidy; tmp goes at the end (sandbox mode) or with Tidy;
//   - its logs and checkpoint directory stay until Prune removes the
//     whole directory, Config.KeepLogs after the attempt ended.
//
// Config.KeepAttemptDirs keeps work and tmp until Prune as well.

// Tidy removes an ended attempt's work and tmp directories: its runner
// has kept what it needs of them. Its logs stay for ReadLog until Prune.
// It refuses an attempt still running, and leaves the directories with
// Config.KeepAttemptDirs.
func (e *Executor) Tidy(name string) error {
	if !attemptNamePattern.MatchString(name) {
		return fmt.Errorf("executor: %q is not an attempt's name", name)
	}
	e.mu.Lock()
	r, held := e.runs[name]
	running := held && !r.ended() // ended: Done is closed, the run not yet let go of
	if !running {
		delete(e.untidied, name)
	}
	e.mu.Unlock()
	if running {
		return fmt.Errorf("executor: attempt %s is still running: not tidied", name)
	}
	if e.cfg.KeepAttemptDirs {
		return nil
	}
	return tidyDir(filepath.Join(e.cfg.Root, name))
}

// Prune removes the directory, logs and all, of every attempt that ended
// before before, and tidies (as Tidy) those that ended since but are no
// longer waited on: left by a start that failed or by the node's last
// run. Attempts running, and those ended whose runner has not tidied them
// yet, are left alone. It returns how many attempt directories it
// removed; an error names the directories it could not remove, and the
// others are pruned all the same.
func (e *Executor) Prune(before time.Time) (int, error) {
	entries, err := os.ReadDir(e.cfg.Root)
	if err != nil {
		return 0, fmt.Errorf("executor: %w", err)
	}
	removed := 0
	var errs []error
	for _, ent := range entries {
		name := ent.Name()
		if !ent.IsDir() || !attemptNamePattern.MatchString(name) {
			continue // not an attempt's (lost+found, say, where Root is a file system of its own)
		}
		e.mu.Lock()
		_, running := e.runs[name]
		waited := e.untidied[name]
		e.mu.Unlock()
		if running || waited {
			continue
		}
		dir := filepath.Join(e.cfg.Root, name)
		if lastChange(dir).Before(before) {
			if err := removeTree(dir); err != nil {
				errs = append(errs, err)
				continue
			}
			removed++
			continue
		}
		if !e.cfg.KeepAttemptDirs {
			if err := tidyDir(dir); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return removed, errors.Join(errs...)
}

// attemptNamePattern matches Attempt.Name: "<job>-s<share>-e<epoch>".
var attemptNamePattern = regexp.MustCompile(`^` + jobIDExpr + `-s[0-9]+-e[0-9]+$`)

// tidyDir removes the work and tmp directories of the attempt at dir.
func tidyDir(dir string) error {
	return removeTrees(filepath.Join(dir, payloadDirName), filepath.Join(dir, tmpDirName))
}

// removeTree removes dir and all it holds, unless something is mounted
// there: removing would reach into what is mounted (a host directory a
// runtime bound and failed to unmount).
func removeTree(dir string) error { return removeTrees(dir) }

// removeTrees is removeTree for several directories, with one read of the
// mount table for them all. Those already gone are skipped (a sandbox's
// tmp goes as its attempt ends); when all are, no mount table is read.
func removeTrees(dirs ...string) error {
	var there []string
	for _, d := range dirs {
		if _, err := os.Lstat(d); !errors.Is(err, fs.ErrNotExist) {
			there = append(there, filepath.Clean(d))
		}
	}
	if len(there) == 0 {
		return nil
	}
	runtime.LockOSThread() // the mounts checked are those this thread sees
	defer runtime.UnlockOSThread()
	mounted, err := mountsUnder(there)
	if err != nil {
		return fmt.Errorf("executor: %s not removed: %w", strings.Join(there, ", "), err)
	}
	var errs []error
	for i, d := range there {
		if mounted[i] != "" {
			errs = append(errs, fmt.Errorf("executor: %s not removed: %s is a mount point", d, mounted[i]))
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("executor: %w", err))
		}
	}
	return errors.Join(errs...)
}

// lastChange is when the attempt at dir last changed: the latest of its
// directory's and its logs' modification times (Tidy's removals change
// the directory's, at the attempt's end).
func lastChange(dir string) time.Time {
	var last time.Time
	for _, p := range []string{dir, filepath.Join(dir, stdoutFileName), filepath.Join(dir, stderrFileName)} {
		if fi, err := os.Lstat(p); err == nil && fi.ModTime().After(last) {
			last = fi.ModTime()
		}
	}
	return last
}
