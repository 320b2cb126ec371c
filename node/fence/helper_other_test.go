//go:build !unix

package fence

func helperMain(string, []string) (int, bool) { return 0, false }
