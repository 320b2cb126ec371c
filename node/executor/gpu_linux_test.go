package executor

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/device"
)

var smiUUID = regexp.MustCompile(`\(UUID: (GPU-[0-9a-f-]+)\)`)

// TestSandboxRealNVIDIACards runs nvidia-smi in sandboxes on a node with
// real NVIDIA cards: given one card's device nodes (CardDevices), a job sees
// exactly that card; given none, it sees no card at all.
//
// Opt-in: GPUMESH_GPU_TEST=1, as root on a node with the NVIDIA driver.
func TestSandboxRealNVIDIACards(t *testing.T) {
	if os.Getenv("GPUMESH_GPU_TEST") == "" {
		t.Skip("set GPUMESH_GPU_TEST=1 to run on a node with NVIDIA cards")
	}
	smi, err := exec.LookPath("nvidia-smi")
	if err != nil {
		t.Skip("nvidia-smi not found")
	}
	nodes, _ := filepath.Glob("/dev/nvidia[0-9]*")
	if len(nodes) == 0 {
		t.Skip("no /dev/nvidia<N> nodes")
	}
	hostOut, err := exec.Command(smi, "-L").Output()
	if err != nil {
		t.Fatalf("nvidia-smi on the node: %v", err)
	}
	hostUUIDs := map[string]bool{}
	for _, m := range smiUUID.FindAllStringSubmatch(string(hostOut), -1) {
		hostUUIDs[m[1]] = true
	}
	ex := sandboxed(t, nil)
	seen := map[string]int{}
	for _, n := range nodes {
		idx, err := strconv.Atoi(strings.TrimPrefix(n, "/dev/nvidia"))
		if err != nil {
			continue
		}
		devs := CardDevices("", []device.Card{{Vendor: device.VendorNVIDIA, Index: idx, Backend: "nvml"}})
		res, out, errOut := runScript(t, ex, Attempt{JobID: fmt.Sprintf("gpu%d", idx), Limits: Limits{Devices: devs}},
			`ls /dev | grep nvidia | tr '\n' ' '; echo; nvidia-smi -L`)
		t.Logf("card %d, devices %v:\n%s%s", idx, devs, out, errOut)
		uuids := smiUUID.FindAllStringSubmatch(out, -1)
		if res.ExitCode != 0 || len(uuids) != 1 || !hostUUIDs[uuids[0][1]] {
			t.Errorf("job given card %d: exit %d, saw %d cards: %s", idx, res.ExitCode, len(uuids), out)
			continue
		}
		if prev, dup := seen[uuids[0][1]]; dup {
			t.Errorf("cards %d and %d both showed %s", prev, idx, uuids[0][1])
		}
		seen[uuids[0][1]] = idx
	}
	res, out, errOut := runScript(t, ex, Attempt{JobID: "no-gpu"}, `ls /dev | grep nvidia; nvidia-smi -L`)
	t.Logf("no card:\n%s%s", out, errOut)
	if n := len(smiUUID.FindAllString(out, -1)); n != 0 || res.ExitCode == 0 {
		t.Errorf("a job given no card saw %d cards (exit %d): %s", n, res.ExitCode, out)
	}
}
