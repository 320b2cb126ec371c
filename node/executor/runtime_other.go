//go:build !linux

package executor

// RuntimeAuto as Config.Runtime picks crun, else runc (Linux only).
const RuntimeAuto = "auto"
