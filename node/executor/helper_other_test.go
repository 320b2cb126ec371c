//go:build !unix

package executor

const helperEnv = "EXECUTOR_TEST_HELPER"

func runHelper(string, []string) int { return 2 }
