//go:build race

package sim

// raceDetector: the race detector slows goroutine-heavy code 5 to 20
// times; wall-clock bounds meant for users are not held under it.
const raceDetector = true
