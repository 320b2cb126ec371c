package probe

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/node/probe/kernel"
)

// TestKernelIRMatchesTheReference compiles the kernels' LLVM IR for this
// machine's CPU instead of a GPU (the thread-index intrinsics replaced by
// a C harness that plays every thread) and checks their digests against
// Block, the Go reference the coordinator recomputes: the kernels' mixing,
// indexing and digests are the reference's. It does not check LLVM's NVPTX
// back end or the CUDA driver (TestRealProbe does, on a GPU). It needs llc
// (Debian's llvm) and a C compiler, and skips without them.
func TestKernelIRMatchesTheReference(t *testing.T) {
	llc, err := exec.LookPath("llc")
	if err != nil {
		t.Skip("no llc (apt-get install llvm)")
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("kernel", "probe.ll"))
	if err != nil {
		t.Fatal(err)
	}
	ir := string(src)
	ir = regexp.MustCompile(`(?m)^target .*$`).ReplaceAllString(ir, "")
	ir = ir[:strings.Index(ir, "!nvvm.annotations")]
	for _, r := range []string{"tid", "ctaid", "ntid", "nctaid"} {
		ir = strings.ReplaceAll(ir, "@llvm.nvvm.read.ptx.sreg."+r+".x", "@k_"+r)
	}
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const seed, words, blocks, rounds = 12345, 1 << 12, 8, 20
	harness := `#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
static int tid, ntid = 1;
int k_tid(void) { return tid; } int k_ctaid(void) { return 0; } int k_ntid(void) { return ntid; } int k_nctaid(void) { return 1; }
void gpumesh_fill(uint64_t *, uint64_t, uint64_t);
void gpumesh_round(uint64_t *, uint64_t *, uint64_t, uint64_t, uint64_t, uint64_t);
void gpumesh_digest(uint64_t *, uint64_t *, uint64_t, uint64_t);
int main(int argc, char **argv) {
	uint64_t seed = strtoull(argv[1], 0, 10), n = strtoull(argv[2], 0, 10), blocks = strtoull(argv[3], 0, 10), bw = n / blocks;
	int rounds = atoi(argv[4]);
	uint64_t *a = malloc(n * 8), *b = malloc(n * 8), *d = malloc(blocks * 8), *in = a, *out = b, *t;
	gpumesh_fill(a, seed, n);
	for (int r = 0; r < rounds; r++) {
		uint64_t m = strtoull(argv[5 + 2 * r], 0, 10), c = strtoull(argv[6 + 2 * r], 0, 10);
		gpumesh_round(out, in, n, bw - 1, m, c);
		t = in; in = out; out = t;
	}
	for (tid = 0; tid < (int)blocks; tid++) gpumesh_digest(d, in, bw, blocks);
	for (uint64_t i = 0; i < blocks; i++) printf("%llu\n", (unsigned long long)d[i]);
	return 0;
}
`
	obj := filepath.Join(dir, "k.o")
	if out, err := exec.Command(llc, "-O2", "-filetype=obj", write("k.ll", ir), "-o", obj).CombinedOutput(); err != nil {
		t.Fatalf("llc: %v\n%s", err, out)
	}
	bin := filepath.Join(dir, "kcheck")
	if out, err := exec.Command(cc, "-O1", write("main.c", harness), obj, "-o", bin).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	args := []string{strconv.Itoa(seed), strconv.Itoa(words), strconv.Itoa(blocks), strconv.Itoa(rounds)}
	for r := range uint32(rounds) {
		m, c := RoundParams(seed, r, words/blocks)
		args = append(args, strconv.FormatUint(m, 10), strconv.FormatUint(c, 10))
	}
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(string(out))
	want := Digests(seed, Work{Words: words, Rounds: rounds}, blocks)
	if len(got) != len(want) {
		t.Fatalf("%d digests from the kernels, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i] != strconv.FormatUint(w, 10) {
			t.Errorf("block %d: the kernels make %s, the reference %d", i, got[i], w)
		}
	}
	if !strings.Contains(kernel.PTX, ".entry gpumesh_round") {
		t.Error("the embedded PTX lacks gpumesh_round")
	}
}
