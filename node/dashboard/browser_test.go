package dashboard

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/market/owner"
	"github.com/gpumesh/gpumesh/node/api"
)

// The browser tests open the dashboard in headless Chromium against a fake
// backend served by the real api.Handler. They skip when no Chromium is
// installed (Debian: apt-get install chromium). Screenshots go to
// $GPUMESH_ARTIFACTS, else to the test's temporary directory; the test logs
// their paths.

// chromium returns the path of a Chromium or Chrome binary, or skips.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("GPUMESH_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium on PATH (Debian package chromium; or set GPUMESH_CHROMIUM): skipping the browser test")
	return ""
}

// browser starts a headless Chromium for the test and returns the context
// of its first tab. The browser is closed at the end of the test, before the
// servers it talks to.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromium(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 900),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelBrowser := chromedp.NewContext(allocCtx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() {
		start := time.Now()
		cancelBrowser()
		cancelAlloc() // waits for the browser process to exit
		t.Logf("%6.2fs  browser closed", time.Since(start).Seconds())
	})
	start := time.Now()
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	t.Logf("%6.2fs  browser started", time.Since(start).Seconds())
	return ctx
}

// tab opens a new tab in the browser for one subtest, closed at its end.
// Every step in it must finish within 20 s.
func tab(t *testing.T, browser context.Context) context.Context {
	t.Helper()
	ctx, cancelTab := chromedp.NewContext(browser)
	ctx, cancelTimeout := context.WithTimeout(ctx, 20*time.Second)
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab()
	})
	return ctx
}

// serve serves the dashboard and fake behind the real API handler. Call it
// before tab, so that the tab closes first. At the end it cuts the
// connections the browser may still hold (an event stream, a followed log)
// and waits for their handlers.
func serve(t *testing.T, f *fakeMesh, token string) string {
	t.Helper()
	srv := httptest.NewServer(api.Handler(api.Config{Token: token, OwnerTokens: map[string]owner.Key{ownerToken: ownerKey}}, f, Handler()))
	t.Cleanup(func() {
		start := time.Now()
		srv.CloseClientConnections()
		srv.Close()
		t.Logf("%6.2fs  server closed", time.Since(start).Seconds())
	})
	return srv.URL
}

// waitFor polls a JavaScript predicate in the page until it holds.
func waitFor(t *testing.T, ctx context.Context, what, predicate string) {
	t.Helper()
	start := time.Now()
	defer func() { t.Logf("%6.2fs  %s", time.Since(start).Seconds(), what) }()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](predicate,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(8*time.Second))); err != nil {
		body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("waiting for %s: %v\npage text:\n%s", what, err, body)
	}
}

// text returns the trimmed text of the first element matching a CSS
// selector ("" when there is none).
func text(t *testing.T, ctx context.Context, selector string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(
		`(document.querySelector(%q) || {innerText: ""}).innerText.trim()`, selector)))
	if err != nil {
		t.Fatalf("text of %s: %v", selector, err)
	}
	return s
}

// value returns the value of the first input matching a CSS selector.
func value(t *testing.T, ctx context.Context, selector string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(
		`(document.querySelector(%q) || {value: ""}).value`, selector)))
	if err != nil {
		t.Fatalf("value of %s: %v", selector, err)
	}
	return s
}

// clickNow clicks the first element matching a CSS selector, found and
// clicked in one step inside the page. The dashboard renders its tables
// again on every refresh: a row that chromedp.Click has found may be
// replaced before its click lands, which fails with "Could not find node
// with given id" (the project's CI saw it). A user's click lands on the
// row drawn at that moment, as this one does.
func clickNow(t *testing.T, ctx context.Context, selector string) {
	t.Helper()
	found, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(
		`(() => { const el = document.querySelector(%q); if (!el) return false; el.click(); return true; })()`, selector)))
	if err != nil {
		t.Fatalf("clicking %s: %v", selector, err)
	}
	if !found {
		t.Fatalf("clicking %s: no such element on the page", selector)
	}
}

// runningJobs is a JavaScript expression: the IDs of the jobs the page
// shows running.
const runningJobs = `[...document.querySelectorAll('#jobs tr[data-job]')].filter(tr => (tr.querySelector('td.state') || {innerText: ''}).innerText.trim() === 'running').map(tr => tr.dataset.job)`

func cellIs(selector, want string) string {
	return fmt.Sprintf(`(document.querySelector(%q) || {innerText: ""}).innerText.trim() === %q`, selector, want)
}

// screenshot saves a PNG of the whole page as a test artifact.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	saveArtifact(t, name, png)
}

// screenshotShowing saves a screenshot that shows what: shows, a
// JavaScript expression, gives the keys of what is on the page (job IDs),
// and the screenshot is kept only when one key is on the page both just
// before and just after it was taken, so it was there in the picture. A
// live page may change in between; it tries again, up to 10 times.
func screenshotShowing(t *testing.T, ctx context.Context, name, what, shows string) {
	t.Helper()
	type shot struct {
		before, after []string
		png           []byte
	}
	// One action, so that nothing of the test runs between the three.
	take := chromedp.Action[shot](func(ctx context.Context, tg *chromedp.Target) (s shot, err error) {
		if s.before, err = chromedp.Evaluate[[]string](shows)(ctx, tg); err != nil {
			return s, err
		}
		if s.png, err = chromedp.FullScreenshot(100)(ctx, tg); err != nil {
			return s, err
		}
		s.after, err = chromedp.Evaluate[[]string](shows)(ctx, tg)
		return s, err
	})
	var s shot
	for range 10 {
		pollFor(t, ctx, 30*time.Second, what, shows+`.length > 0`)
		var err error
		if s, err = chromedp.Run(ctx, take); err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		for _, k := range s.before {
			if slices.Contains(s.after, k) {
				saveArtifact(t, name, s.png)
				t.Logf("%s shows %s: %s", name, what, k)
				return
			}
		}
	}
	t.Fatalf("no screenshot showing %s: the page changed under every one (last: %v before, %v after)", what, s.before, s.after)
}

// saveArtifact writes a test artifact to $GPUMESH_ARTIFACTS (.ci/run sets
// it to the repository's artifacts/), else to the test's temporary
// directory.
func saveArtifact(t *testing.T, name string, png []byte) {
	t.Helper()
	dir := os.Getenv("GPUMESH_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
}

// TestDashboardInBrowser runs the page's scenarios in one headless
// Chromium, a tab each.
func TestDashboardInBrowser(t *testing.T) {
	b := browser(t)
	t.Run("mesh and events", func(t *testing.T) { testMeshAndEvents(t, b) })
	t.Run("without an owner token", func(t *testing.T) { testWithoutOwnerToken(t, b) })
	t.Run("token", func(t *testing.T) { testAsksForToken(t, b) })
}

// waitSubscribed waits until the page follows the fake's events.
func waitSubscribed(t *testing.T, ctx context.Context, f *fakeMesh) {
	t.Helper()
	waitFor(t, ctx, "the live indicator", `document.getElementById('live').dataset.live === 'yes'`)
	deadline := time.Now().Add(5 * time.Second)
	for f.subscribers() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the page never subscribed to /v1/events")
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
}

// testMeshAndEvents: opened with the owner's token, the page shows the
// members, the cards, the owner's running jobs, what the mesh sells and
// what this node earned, and changes when the node's state changes and an
// event says so; on a job's page the owner scales and cancels it.
func testMeshAndEvents(t *testing.T, browser context.Context) {
	f := newFakeMesh()
	url := serve(t, f, "")
	ctx := tab(t, browser)
	if err := chromedp.Do(ctx, chromedp.Navigate(url+"/?token="+ownerToken)); err != nil {
		t.Fatal(err)
	}

	// The mesh: three members with their state, region and cards.
	waitFor(t, ctx, "three members", `document.querySelectorAll('#members tbody tr[data-peer]').length === 3`)
	for _, p := range []struct{ id, state, region, cards string }{
		{peerSelf, "alive", "cn-east", "2"}, {peerTwo, "alive", "cn-east", "8"}, {peerThree, "alive", "cn-north", "4"},
	} {
		row := fmt.Sprintf(`#members tr[data-peer=%q]`, p.id)
		if got := text(t, ctx, row+" td.state"); got != p.state {
			t.Errorf("member %s state %q, want %q", p.id, got, p.state)
		}
		if got := text(t, ctx, row+" td:nth-child(3)"); got != p.region {
			t.Errorf("member %s region %q, want %q", p.id, got, p.region)
		}
		if got := text(t, ctx, row+" td:nth-child(4)"); got != p.cards {
			t.Errorf("member %s cards %q, want %q", p.id, got, p.cards)
		}
	}
	// Capacity by model, this node's cards, the summary tiles.
	if got := text(t, ctx, `.cap-row[data-model="rtx4090-48g"] .counts`); got != "4 free / 8" {
		t.Errorf("rtx4090 capacity %q, want %q", got, "4 free / 8")
	}
	if got := text(t, ctx, `#node-cards tr[data-card="GPU-a1"]`); !strings.Contains(got, "h100-sxm-80g") || !strings.Contains(got, "running") {
		t.Errorf("this node's card GPU-a1: %q", got)
	}
	if got := text(t, ctx, `[data-tile="cards"] .value`); got != "7 / 14" {
		t.Errorf("cards tile %q, want 7 / 14", got)
	}
	// The running jobs and their placements.
	waitFor(t, ctx, "the jobs", cellIs(fmt.Sprintf(`#jobs tr[data-job=%q] td.state`, jobTrain), "running"))
	if got := text(t, ctx, fmt.Sprintf(`#jobs tr[data-job=%q]`, jobTrain)); !strings.Contains(got, "rtx4090-48g×4") || !strings.Contains(got, "17.25") {
		t.Errorf("training job row %q: want its rtx4090-48g×4 placement and ¥17.25", got)
	}
	if got := text(t, ctx, fmt.Sprintf(`#jobs tr[data-job=%q] td.state`, jobQueued)); got != "pending" {
		t.Errorf("queued job state %q", got)
	}
	// What the mesh sells: the offers with a free card, cheapest first,
	// with their reliability; the one with none free is counted.
	waitFor(t, ctx, "the offers", `document.querySelectorAll('#offers tr[data-offer]').length === 2`)
	offers, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#offers tr[data-offer]')].map(tr => tr.dataset.offer)`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(offers, ",") != peerTwo+"/rtx4090-48g,"+peerSelf+"/h100-sxm-80g" {
		t.Errorf("offers %v, want the 4090s then the H100s", offers)
	}
	if got := text(t, ctx, fmt.Sprintf(`#offers tr[data-offer=%q]`, peerTwo+"/rtx4090-48g")); !strings.Contains(got, "4/8") || !strings.Contains(got, "4.50") ||
		!strings.Contains(got, "8.49") || !strings.Contains(got, "here 1 of 4 lost, MTBF 5h00m") || !strings.Contains(got, "cn-east") {
		t.Errorf("4090 offer row %q", got)
	}
	if got := text(t, ctx, "#offers-summary"); got != "2 offers · 5 free cards · 1 more with no free card (4 cards busy)" {
		t.Errorf("offers summary %q", got)
	}
	// What this node earned.
	if got := text(t, ctx, `[data-tile="earned-today"] .value`); got != "¥11.25" {
		t.Errorf("earned today %q, want ¥11.25", got)
	}
	if got := text(t, ctx, `#earnings-models tr[data-model="h100-sxm-80g"]`); !strings.Contains(got, "96.50") || !strings.Contains(got, "412.75") {
		t.Errorf("earnings of the H100s %q", got)
	}
	// The event stream is connected before the fake emits anything.
	waitSubscribed(t, ctx, f)

	// The mesh moves: a peer dies, the eval job finishes, an auction and a
	// reroute happen.
	f.update(func(f *fakeMesh) {
		f.peers[2].State = "dead"
		i, _ := f.job(jobEval)
		f.jobs[i].State = market.JobSucceeded
		f.jobs[i].Placements[0].State = market.PlacementExited
		f.jobs[i].CostCNY = 0.5
	})
	mine := string(ownerKey.ID())
	f.emit(api.Event{Type: "member", Peer: peerThree, State: "dead"})
	f.emit(api.Event{Type: "job", Job: jobEval, From: "running", State: "succeeded", Reason: "every share exited 0", Owner: mine})
	f.emit(api.Event{Type: "auction", Job: jobQueued, State: "bidding", Reason: "asked 3 nodes", Epoch: 1, Owner: mine})
	f.emit(api.Event{Type: "reroute", Job: jobTrain, Reason: "share 1 lost: lease lapsed", Epoch: 3, Owner: mine})

	waitFor(t, ctx, "the dead member", cellIs(fmt.Sprintf(`#members tr[data-peer=%q] td.state`, peerThree), "dead"))
	waitFor(t, ctx, "the finished job", cellIs(fmt.Sprintf(`#jobs tr[data-job=%q] td.state`, jobEval), "succeeded"))
	// The feed shows the four events, newest first: only the event stream
	// puts them there.
	waitFor(t, ctx, "four events in the feed", `document.querySelectorAll('#feed li[data-type]').length === 4`)
	kinds, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
		`[...document.querySelectorAll('#feed li[data-type]')].map(li => li.dataset.type)`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(kinds, ",") != "reroute,auction,job,member" {
		t.Errorf("feed kinds %v, want reroute,auction,job,member", kinds)
	}
	if got := text(t, ctx, `#feed li[data-type="reroute"]`); !strings.Contains(got, "share 1 lost: lease lapsed") || !strings.Contains(got, "epoch 3") {
		t.Errorf("reroute item %q", got)
	}
	waitFor(t, ctx, "the members tile", cellIs(`[data-tile="members"] .detail`, "0 suspect · 1 dead · 0 left"))
	// A share placed on this node's own cards.
	f.emit(api.Event{Type: "placement", Job: jobTrain, Node: peerSelf, Share: 0, Epoch: 4, Model: "h100-sxm-80g", Cards: 1, PriceCNY: 22.5, State: "running"})
	waitFor(t, ctx, "the placement in the feed", `document.querySelectorAll('#feed li[data-type="placement"]').length === 1`)
	if got := text(t, ctx, `#feed li[data-type="placement"]`); !strings.Contains(got, jobTrain+" share 0 on this node: h100-sxm-80g×1 at ¥22.50/card-h epoch 4") {
		t.Errorf("placement item %q", got)
	}
	if got := text(t, ctx, fmt.Sprintf(`#jobs tr[data-job=%q] td.state`, jobTrain)); got != "running" {
		t.Errorf("training job %q after the events, want still running", got)
	}
	screenshotShowing(t, ctx, "dashboard-mesh.png", "the running training job", runningJobs+fmt.Sprintf(`.filter(id => id === %q)`, jobTrain))

	// The job page: placements, bill, logs; the env's values stay hidden.
	clickNow(t, ctx, fmt.Sprintf(`#jobs tr[data-job=%q] a`, jobTrain))
	waitFor(t, ctx, "the job's logs", `document.getElementById('logs').innerText.includes('step 2/3 loss=0.31')`)
	if got := text(t, ctx, `[data-bill="cost"]`); got != "¥17.25" {
		t.Errorf("bill %q, want ¥17.25", got)
	}
	if got := text(t, ctx, `#placements tr[data-share="1"]`); !strings.Contains(got, "rtx4090-48g") || !strings.Contains(got, "running") || !strings.Contains(got, "4.50") {
		t.Errorf("placement of share 1: %q", got)
	}
	if got := text(t, ctx, "#job-page"); strings.Contains(got, "hf_secret_value") || !strings.Contains(got, "HF_TOKEN") {
		t.Errorf("job page shows env values or hides env names:\n%s", got)
	}
	if got := text(t, ctx, "#log-state"); got != "following…" {
		t.Errorf("log state of a running job %q, want following…", got)
	}
	// A reroute event of this job shows on its page.
	f.emit(api.Event{Type: "reroute", Job: jobTrain, Reason: "share 0 lost: card_lost", Epoch: 4})
	waitFor(t, ctx, "the job's own events", `document.querySelectorAll('#job-feed li[data-type="reroute"]').length === 2`)
	// stderr of the same share.
	if err := chromedp.Do(ctx, chromedp.Click(`input[name="log-stream"][value="stderr"]`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "stderr", `document.getElementById('logs').innerText.includes('warning: stderr of share 0')`)
	// The owner's controls: the job is elastic (1 to 8 cards).
	waitFor(t, ctx, "the job's controls", `!document.getElementById('job-controls').hidden && !document.getElementById('scale-box').hidden`)
	screenshot(t, ctx, "dashboard-job.png")
	if err := chromedp.Do(ctx, chromedp.SetValue("#scale-cards", "6")); err != nil {
		t.Fatal(err)
	}
	// The page draws the job again before the owner clicks: the number typed
	// and not yet sent stays.
	f.emit(api.Event{Type: "reroute", Job: jobTrain, Reason: "share 1 lost: card_lost", Epoch: 5})
	waitFor(t, ctx, "the page drawn again", `document.querySelectorAll('#job-feed li[data-type="reroute"]').length === 3`)
	if got := value(t, ctx, "#scale-cards"); got != "6" {
		t.Fatalf("a refresh replaced the typed number of cards with %q", got)
	}
	if err := chromedp.Do(ctx, chromedp.Click("#scale-job")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the scale", cellIs("#control-msg", "scale: running, 6 cards"))
	if err := chromedp.Do(ctx, chromedp.Click("#cancel-job")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the cancel armed", cellIs("#cancel-job", "Cancel it: click again"))
	if n := f.cancelled(); n != 0 {
		t.Fatalf("one click cancelled the job (%d cancels)", n)
	}
	if err := chromedp.Do(ctx, chromedp.Click("#cancel-job")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the job cancelled", cellIs("#job-state", "cancelled")+` && document.getElementById('job-controls').hidden`)
	if n := f.cancelled(); n != 1 {
		t.Errorf("%d cancels, want 1", n)
	}

	// An unknown job says so.
	if err := chromedp.Do(ctx, chromedp.Navigate(url+"/#/job/j-nope")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the error", `document.getElementById('error').innerText.includes('no job "j-nope"')`)
}

// testWithoutOwnerToken: opened without a token, the page shows the mesh,
// its offers and this node's cards at work, says the owner's token is
// needed to list jobs and how to give it, and shows in the Activity pane
// the node's own cards at work and other owners' auctions without naming
// their jobs. Given the owner's token, it lists the jobs.
func testWithoutOwnerToken(t *testing.T, browser context.Context) {
	f := newFakeMesh()
	url := serve(t, f, "")
	ctx := tab(t, browser)
	if err := chromedp.Do(ctx, chromedp.Navigate(url+"/")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "three members", `document.querySelectorAll('#members tbody tr[data-peer]').length === 3`)
	waitFor(t, ctx, "the owner-token note", `!!document.querySelector('#jobs tr[data-empty="no-owner"]')`)
	note := text(t, ctx, `#jobs tr[data-empty="no-owner"]`)
	for _, want := range []string{"Jobs are shown to their owner only", url + "/?token=OWNER_TOKEN", "--owner-tokens", "enter your owner token"} {
		if !strings.Contains(note, want) {
			t.Errorf("the jobs note %q lacks %q", note, want)
		}
	}
	if strings.Contains(note, "No jobs yet") {
		t.Errorf("the page says there are no jobs: %q", note)
	}
	// The same page shows this node's card running a job: the note says
	// why the job is not listed.
	if got := text(t, ctx, `#node-cards tr[data-card="GPU-a1"]`); !strings.Contains(got, "running") || !strings.Contains(got, jobTrain) {
		t.Errorf("this node's card GPU-a1: %q", got)
	}
	waitFor(t, ctx, "the offers", `document.querySelectorAll('#offers tr[data-offer]').length === 2`)

	waitSubscribed(t, ctx, f)
	mine := string(ownerKey.ID())
	f.emit(api.Event{Type: "job", Job: jobQueued, From: "pending", State: "bidding", Reason: "asked 3 nodes", Owner: mine})
	f.emit(api.Event{Type: "auction", Job: jobQueued, From: "bidding", State: "placing", Reason: "cleared", Epoch: 1, Owner: mine})
	f.emit(api.Event{Type: "placement", Job: jobTrain, Node: peerSelf, Share: 0, Epoch: 1, Model: "h100-sxm-80g", Cards: 1, PriceCNY: 22.5, State: "running"})
	f.emit(api.Event{Type: "member", Peer: peerTwo, State: "alive"})
	waitFor(t, ctx, "three events in the feed", `document.querySelectorAll('#feed li[data-type]').length === 3`)
	kinds, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#feed li[data-type]')].map(li => li.dataset.type)`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(kinds, ",") != "member,placement,auction" {
		t.Errorf("feed kinds %v, want member,placement,auction (another owner's change of state is not sent)", kinds)
	}
	if got := text(t, ctx, `#feed li[data-type="auction"]`); !strings.Contains(got, "a job (its owner's token shows which)") || strings.Contains(got, jobQueued) || strings.Contains(got, "cleared") {
		t.Errorf("another owner's auction %q: want it without its job and reason", got)
	}
	if got := text(t, ctx, `#feed li[data-type="placement"]`); !strings.Contains(got, jobTrain+" share 0 on this node: h100-sxm-80g×1") {
		t.Errorf("this node's placement %q", got)
	}
	screenshot(t, ctx, "dashboard-no-token.png")

	// The owner gives the token: the jobs are listed.
	if err := chromedp.Do(ctx, chromedp.Click("#owner-token-button")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the token dialog", `!document.getElementById('token-dialog').hidden && document.getElementById('token-why').innerText.includes('owner token')`)
	if err := chromedp.Do(ctx, chromedp.SendKeys("#token-input", ownerToken), chromedp.Click(`#token-form button`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the owner's jobs", `document.querySelectorAll('#jobs tr[data-job]').length === 3`)
}

// testAsksForToken: against a node with a token, the page asks for it,
// says when it is wrong, and works once given the right one.
func testAsksForToken(t *testing.T, browser context.Context) {
	f := newFakeMesh()
	url := serve(t, f, "tok-7d1c")
	ctx := tab(t, browser)
	if err := chromedp.Do(ctx, chromedp.Navigate(url+"/")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the token dialog", `!document.getElementById('token-dialog').hidden`)
	if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#members tr[data-peer]').length`)); n != 0 {
		t.Fatalf("%d members shown without a token", n)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys("#token-input", "wrong"), chromedp.Click(`#token-form button`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the refusal", `!document.getElementById('token-dialog').hidden && document.getElementById('token-why').innerText.includes('refused')`)
	if err := chromedp.Do(ctx, chromedp.SendKeys("#token-input", "tok-7d1c"), chromedp.Click(`#token-form button`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the members", `document.querySelectorAll('#members tr[data-peer]').length === 3`)
	waitFor(t, ctx, "the live indicator", `document.getElementById('live').dataset.live === 'yes'`)
	if got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`sessionStorage.getItem('gpumesh.token')`)); got != "tok-7d1c" {
		t.Errorf("token in sessionStorage %q", got)
	}
	if got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`localStorage.length + ''`)); got != "0" {
		t.Errorf("localStorage holds %s items; the token must stay in the tab", got)
	}
}
