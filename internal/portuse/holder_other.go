//go:build !linux

package portuse

// holder cannot be found here without tools this package does not run.
func holder(string, int) (int, string) { return 0, "" }
