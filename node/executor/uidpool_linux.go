package executor

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// uidPool hands out uids for running attempts. A uid is held by an
// exclusive flock on "<dir>/<uid>.lock", so every executor on the host that
// shares the lock directory sees it taken, and a node that dies releases its
// uids with its file descriptors. Whatever a dead holder left behind (its
// processes, cgroup, network) is cleaned by the next holder before use.
type uidPool struct {
	dir      string
	min, max uint32
	skip     map[uint32]bool // used by accounts or subordinate id ranges

	mu   sync.Mutex
	held map[uint32]*os.File

	scan *procScanner // the uids the host's processes run as
	// scanFresh is how old a scan of the host's processes may be to show
	// that no process runs as a uid (the constant scanFresh; tests change
	// it); a scan that shows one is made again before the uid is passed
	// over.
	scanFresh time.Duration
}

// scanFresh bounds how old a scan of the host's processes acquire trusts
// to show a uid unused. A scan costs about 0.8 ms on a host of 76
// processes, most of a sandboxed start's own CPU after the file system;
// at many starts a second, one scan serves them all. The scan guards
// against a process outside every executor running as a uid of the range
// (uids of accounts and subordinate ranges are skipped outright), which it
// could only ever see at one moment: one that starts a second before is
// missed, as one that starts a moment after always was.
const scanFresh = time.Second

func newUIDPool(dir string, min, max uint32) (*uidPool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("uid lock dir: %w", err)
	}
	p := &uidPool{dir: dir, min: min, max: max, skip: map[uint32]bool{}, held: map[uint32]*os.File{}, scan: newProcScanner(), scanFresh: scanFresh}
	for _, f := range []string{"/etc/passwd", "/etc/group"} {
		for _, id := range accountIDs(f) {
			if id >= min && id <= max {
				p.skip[id] = true
			}
		}
	}
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		for _, r := range subordinateRanges(f) {
			for id := max32(r[0], min); id <= r[1] && id <= max; id++ {
				p.skip[id] = true
			}
		}
	}
	if uint64(len(p.skip)) > uint64(max-min) { // all taken
		return nil, fmt.Errorf("uid range %d..%d is taken by accounts or /etc/subuid, /etc/subgid ranges", min, max)
	}
	return p, nil
}

// skipped tells how many ids of the range are not handed out.
func (p *uidPool) skipped() int { return len(p.skip) }

// acquire takes the lowest free uid. clean is called with the lock held
// and before the uid is checked for live processes, to remove what a dead
// holder left. It fails with ErrNoUID when every uid is taken.
func (p *uidPool) acquire(clean func(uid uint32)) (uint32, error) {
	var procs map[uint32]bool
	var fresh bool
	for id := p.min; id <= p.max && id >= p.min; id++ {
		if p.skip[id] {
			continue
		}
		p.mu.Lock()
		_, mine := p.held[id]
		p.mu.Unlock()
		if mine {
			continue
		}
		f, err := p.lock(id)
		if errors.Is(err, unix.EWOULDBLOCK) {
			continue
		}
		if err != nil {
			return 0, err
		}
		clean(id)
		if procs == nil {
			procs, fresh = p.scan.uidsWithin(p.scanFresh)
		}
		if procs[id] && !fresh { // perhaps one of this executor's own, ended since
			procs, fresh = p.scan.uids(), true
		}
		if procs[id] { // someone else's process runs as this uid
			f.Close()
			continue
		}
		p.mu.Lock()
		p.held[id] = f
		p.mu.Unlock()
		return id, nil
	}
	return 0, fmt.Errorf("%w: all of %d..%d are in use", ErrNoUID, p.min, p.max)
}

// tryAcquire takes uid id if it is free, for cleaning what a dead holder
// left; it reports false when the uid is held.
func (p *uidPool) tryAcquire(id uint32) bool {
	p.mu.Lock()
	_, mine := p.held[id]
	p.mu.Unlock()
	if mine {
		return false
	}
	f, err := p.lock(id)
	if err != nil {
		return false
	}
	p.mu.Lock()
	p.held[id] = f
	p.mu.Unlock()
	return true
}

func (p *uidPool) lock(id uint32) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(p.dir, strconv.FormatUint(uint64(id), 10)+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("uid lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// close lets go of what the pool keeps open; it must not be used after.
func (p *uidPool) close() { p.scan.close() }

// release gives uid id back. Call it only once nothing runs as id.
func (p *uidPool) release(id uint32) {
	p.mu.Lock()
	f := p.held[id]
	delete(p.held, id)
	p.mu.Unlock()
	if f != nil {
		f.Close() // drops the flock
	}
}

// accountIDs returns the third field (uid or gid) of each line of a
// passwd- or group-format file.
func accountIDs(path string) []uint32 {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []uint32
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) > 2 {
			if id, err := strconv.ParseUint(fields[2], 10, 32); err == nil {
				out = append(out, uint32(id))
			}
		}
	}
	return out
}

// subordinateRanges returns the [first, last] id ranges of a subuid- or
// subgid-format file.
func subordinateRanges(path string) [][2]uint32 {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return parseSubordinate(b)
}

// parseSubordinate reads "name:first:count" lines, skipping malformed ones
// and ranges that leave the 32-bit id space.
func parseSubordinate(data []byte) [][2]uint32 {
	var out [][2]uint32
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Split(strings.TrimSpace(line), ":")
		if len(fields) != 3 {
			continue
		}
		first, err1 := strconv.ParseUint(fields[1], 10, 32)
		count, err2 := strconv.ParseUint(fields[2], 10, 32)
		if err1 != nil || err2 != nil || count == 0 || first+count-1 > 1<<32-1 {
			continue
		}
		out = append(out, [2]uint32{uint32(first), uint32(first + count - 1)})
	}
	return out
}

func max32(a, b uint32) uint32 {
	if a > b {
		return a
	}
	return b
}
