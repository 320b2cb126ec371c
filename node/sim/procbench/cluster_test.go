package procbench

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A mesh that does not form says, for each node not seen coordinating,
// how many of the others see it so and whether it sees itself so: nodes
// that never coordinate (--coordinator never) show as seen by none and not
// by themselves, which tells a flag never raised from news of it lost.
func TestAMeshThatDoesNotFormSaysWhoSeesWhom(t *testing.T) {
	cfg := Config{Binary: binary, Nodes: 2, Cards: 1, Model: DefaultModel, Progress: func(string) {}, nodeArgs: []string{"--coordinator", "never"}}
	c := &cluster{cfg: cfg, dir: t.TempDir(), hc: &http.Client{Timeout: 10 * time.Second}}
	defer c.stop(time.Second)
	if err := c.writeOwner(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range cfg.Nodes {
		p, err := c.start(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		c.procs = append(c.procs, p)
	}
	err := c.waitFormed(ctx, 10*time.Second)
	if err == nil {
		t.Fatal("a mesh of nodes that never coordinate formed")
	}
	for _, want := range []string{
		"sees 0 of 2 members coordinating",
		"asked all 2 nodes whom they see alive and coordinating, 2 answered",
		"node-0 seen by 0 of 1 others, itself: no",
		"node-1 seen by 0 of 1 others, itself: no",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q: %v", want, err)
		}
	}
}
