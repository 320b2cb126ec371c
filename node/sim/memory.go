package sim

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Memory a simulation needs, measured on linux/amd64 with Go 1.25 (heap,
// stacks and the runtime's overhead, rounded up). gpumesh bench and
// gpumesh demo refuse a mesh by the same figures.
const (
	// FullNodeMiB is one full node on mesh.SimNetwork (node.Start: libp2p
	// host, memberlist, gossipsub, market, bbolt) plus its share of the
	// links.
	FullNodeMiB = 10
	// BaseMiB is the process itself.
	BaseMiB = 100
	// MemoryShare is the share of the memory available that a simulation
	// may take: CheckDemoMemory and the bench's CheckMemory refuse more.
	MemoryShare = 0.8
)

// ErrTooBig is wrapped by the memory checks when a mesh would not fit.
var ErrTooBig = errors.New("not enough memory")

// MemInfo reads the machine's total and available memory in MiB from
// /proc/meminfo; zeros where it cannot (not Linux).
func MemInfo() (total, avail uint64) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "MemTotal:":
			total = v / 1024
		case "MemAvailable:":
			avail = v / 1024
		}
	}
	return total, avail
}

// Fits reports whether needMiB is within MemoryShare of availMiB.
func Fits(needMiB, availMiB uint64) bool {
	return float64(needMiB) <= MemoryShare*float64(availMiB)
}

// MaxFullNodes is how many full nodes fit in availMiB (BaseMiB and
// MemoryShare counted).
func MaxFullNodes(availMiB uint64) uint64 {
	budget := MemoryShare*float64(availMiB) - BaseMiB
	if budget < 0 {
		return 0
	}
	return uint64(budget) / FullNodeMiB
}

// DemoNodes is how many full nodes a demo of n suppliers runs: the
// suppliers and their coordinators without cards (DefaultCoordinators).
func DemoNodes(n int) int { return n + DefaultCoordinators(n) }

// EstimateDemoMiB is the memory a demo of n suppliers needs: BaseMiB and
// FullNodeMiB per full node (DemoNodes). The jobs' processes (sleep) are
// not counted: a few hundred KiB each, outside this process.
func EstimateDemoMiB(n int) uint64 {
	return BaseMiB + uint64(max(DemoNodes(n), 0))*FullNodeMiB
}

// CheckDemoMemory refuses a demo of n suppliers whose estimate
// (EstimateDemoMiB) is above MemoryShare of the memory available now,
// with the estimate and what is available. Where the available memory is
// unknown it lets the demo go.
func CheckDemoMemory(n int) error {
	_, avail := MemInfo()
	return checkDemoMemory(n, avail)
}

func checkDemoMemory(n int, availMiB uint64) error {
	if availMiB == 0 {
		return nil
	}
	need := EstimateDemoMiB(n)
	if Fits(need, availMiB) {
		return nil
	}
	most := max(int(MaxFullNodes(availMiB))-DefaultCoordinators(n), 0)
	for most > 0 && !Fits(EstimateDemoMiB(most), availMiB) {
		most--
	}
	return fmt.Errorf("%w: %d suppliers and %d coordinators are %d full nodes × %d MiB: about %d MiB, and %d MiB is available (at most %.0f%% of it is used); ask for fewer nodes (at most about %d here)",
		ErrTooBig, n, DefaultCoordinators(n), DemoNodes(n), FullNodeMiB, need, availMiB, 100*MemoryShare, most)
}
