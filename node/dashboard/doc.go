// Package dashboard is the web page every node serves at "/": the mesh
// (members, their state, region and cards), capacity by model (free,
// reserved, busy), what the mesh sells (the offers of GET /v1/offers),
// this node's cards and what they earned, the owner's jobs with their
// placements and live state (a page without the owner's token says that it
// needs one and how to give it), auctions, placements, reroutes and ends as
// they happen, and a page per job (#/job/ID) with its placements, bill and
// logs, and buttons that cancel and scale it.
//
// The files are plain HTML, CSS and JavaScript embedded in the binary
// (go:embed): no framework, no build step, no CDN. The page reads the node's
// API on its own origin and follows GET /v1/events; when the API answers
// 401 it asks for the token and keeps it in the tab's sessionStorage. The
// node wires it in with
//
//	api.Handler(cfg, backend, dashboard.Handler())
//
// Tests drive the page in headless Chromium (chromedp) against a fake
// backend, and against a running demo mesh; they skip when no Chromium is
// installed. Set GPUMESH_ARTIFACTS (an absolute path; .ci/run sets the
// repository's artifacts/) to keep the screenshots they take.
package dashboard
