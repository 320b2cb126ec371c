package main

import (
	"strings"
	"testing"

	"github.com/gpumesh/gpumesh/node/fence"
)

// The fence keeper runs from main under exactly {binary, fence.Subcommand},
// and is nowhere in the command line a user sees.
func TestFenceKeeperIsHidden(t *testing.T) {
	argv, err := fence.Command()
	if err != nil {
		t.Fatal(err)
	}
	if !isFenceKeeper(argv) {
		t.Fatalf("fence.Command() = %q does not run the keeper", argv)
	}
	for _, args := range [][]string{
		{"gpumesh"},
		{"gpumesh", "node"},
		{"gpumesh", fence.Subcommand, "extra"},
		{"gpumesh", "--" + fence.Subcommand},
		{"gpumesh", "node", fence.Subcommand},
	} {
		if isFenceKeeper(args) {
			t.Errorf("%q runs the keeper", args)
		}
	}

	code, out, _ := runCmd(t, "--help")
	if code != exitOK || strings.Contains(out, fence.Subcommand) || strings.Contains(out, "fence") {
		t.Fatalf("gpumesh --help: exit %d, mentions the keeper:\n%s", code, out)
	}
	// Past main, the name is no command at all.
	code, _, errOut := runCmd(t, fence.Subcommand)
	if code == exitOK || !strings.Contains(errOut, "unknown command") {
		t.Fatalf("gpumesh %s through the command line: exit %d, %q", fence.Subcommand, code, errOut)
	}
}
