// Package market holds the auction and the job lifecycle as pure state
// machines: no goroutines, no network, no clock, no disk. Events go in, and
// decisions (messages to send, executions to start or stop, records to
// persist) come out.
package market
