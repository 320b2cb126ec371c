package dashboard

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gpumesh/gpumesh/node/sim"
)

// TestDashboardOnDemoMesh opens the dashboard of a running `gpumesh demo`
// mesh (real nodes on an in-memory network, real job processes) through
// the link the demo prints, and checks that the members, the capacity and
// a running job appear, and that the page follows the mesh as it moves.
func TestDashboardOnDemoMesh(t *testing.T) {
	chromium(t) // skip before starting anything
	// Made here, before the cleanup below that stops the demo: cleanups
	// run last first, so the directory is removed after the demo's nodes
	// stopped writing into it. (Made inside the goroutine, its removal
	// could be registered last and run while they still wrote.)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu   sync.Mutex
		last sim.Progress
		done = make(chan error, 1)
	)
	go func() {
		_, err := sim.RunDemo(ctx, sim.DemoConfig{
			Nodes:     10,
			Duration:  3 * time.Minute, // stopped by cancel when the test is done
			Seed:      7,
			API:       "127.0.0.1:0",
			Dashboard: Handler(),
			Chaos:     true,
			TimeScale: 300, // suppliers come and go within the test
			Dir:       dir,
			Progress: func(p sim.Progress) {
				mu.Lock()
				defer mu.Unlock()
				last = p
			},
		})
		done <- err
	}()
	// Registered before the browser's cleanup, so it runs after it: the
	// browser closes before the mesh stops.
	t.Cleanup(func() {
		cancel()
		start := time.Now()
		<-done
		t.Logf("%6.2fs  demo stopped", time.Since(start).Seconds())
	})
	b := browser(t)

	var p sim.Progress
	deadline := time.Now().Add(90 * time.Second)
	for {
		mu.Lock()
		p = last
		mu.Unlock()
		if p.Phase == sim.PhaseRunning && p.API != "" && p.Jobs.Running > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo did not run a job within 90 s; last progress:\n%v", p.Lines())
		}
		time.Sleep(100 * time.Millisecond) // polling interval
	}
	t.Logf("demo running: %v", p.Lines())

	tabCtx, cancelTab := chromedp.NewContext(b)
	tabCtx, cancelTimeout := context.WithTimeout(tabCtx, 60*time.Second)
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab()
	})
	link := fmt.Sprintf("http://%s/?token=%s", p.API, p.Token)
	if err := chromedp.Do(tabCtx, chromedp.Navigate(link)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, tabCtx, "the token taken out of the address", `location.search === ''`)
	waitFor(t, tabCtx, "the live indicator", `document.getElementById('live').dataset.live === 'yes'`)
	if !isHidden(t, tabCtx, "token-dialog") {
		t.Error("the page asked for a token although the link carried the demo owner's")
	}

	// The members: most of the demo's nodes, alive, with their cards.
	waitFor(t, tabCtx, "the members", `[...document.querySelectorAll('#members tbody tr[data-peer] td.state')].filter(td => td.innerText.trim() === 'alive').length >= 8`)
	// Capacity by model: the mix of the demo (IDC, café and home cards).
	waitFor(t, tabCtx, "capacity of several models", `document.querySelectorAll('.cap-row[data-model]').length >= 3`)
	// The demo owner's jobs, one of them running with its placement.
	// A job's event marks its row running at once; its placement comes
	// with the refresh that follows: wait for a row that has both.
	running := `[...document.querySelectorAll('#jobs tr[data-job]')].filter(tr => (tr.querySelector('td.state') || {innerText: ''}).innerText.trim() === 'running')`
	placed := running + `.filter(tr => tr.innerText.includes('×'))`
	waitFor(t, tabCtx, "a running job", running+`.length >= 1`)
	waitFor(t, tabCtx, "a running job's row with its placement (model×cards)", placed+`.length >= 1`)

	// The page follows the mesh: events arrive in the feed and the job
	// list changes (jobs submitted, placed, finished) without a reload.
	before, err := chromedp.Run(tabCtx, chromedp.Evaluate[string](`[...document.querySelectorAll('#jobs tr[data-job]')].map(tr => tr.dataset.job + ':' + tr.querySelector('td.state').innerText.trim()).join(',')`))
	if err != nil {
		t.Fatal(err)
	}
	// The feed shows what this node sees: member changes, and the
	// auctions and placements of the jobs it coordinates, which may be
	// none of the demo's. A calm demo mesh sends a few a second at most.
	pollFor(t, tabCtx, 30*time.Second, "events in the feed", `document.querySelectorAll('#feed li[data-type]').length >= 5`)
	pollFor(t, tabCtx, 30*time.Second, "the job list to change", fmt.Sprintf(
		`[...document.querySelectorAll('#jobs tr[data-job]')].map(tr => tr.dataset.job + ':' + tr.querySelector('td.state').innerText.trim()).join(',') !== %q`, before))
	// The artifact shows the mesh with a job running: jobs finish and
	// start under the test, so the running job must be on the page both
	// before and after the picture is taken.
	screenshotShowing(t, tabCtx, "dashboard-demo.png", "a running job", runningJobs)
}

// isHidden reports whether the element with the ID is hidden.
func isHidden(t *testing.T, ctx context.Context, id string) bool {
	t.Helper()
	h, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`document.getElementById(%q).hidden`, id)))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// pollFor is waitFor with its own timeout, for what a live mesh takes a
// while to do.
func pollFor(t *testing.T, ctx context.Context, timeout time.Duration, what, predicate string) {
	t.Helper()
	start := time.Now()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](predicate,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(timeout))); err != nil {
		body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("waiting for %s: %v\npage text:\n%s", what, err, body)
	}
	t.Logf("%6.2fs  %s", time.Since(start).Seconds(), what)
}
