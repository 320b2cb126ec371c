//go:build !unix

package client_test

import "errors"

func mkfifo(string) error { return errors.New("no named pipes on this platform") }
