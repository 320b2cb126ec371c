// Package executor runs one share of a job on this node: a private work
// directory, the job's payload unpacked into it, exactly the environment it
// needs (its cards, its identity, its gang rendezvous), its output captured
// to files with a bounded in-memory tail, and a stop that is SIGTERM, a grace
// period, then SIGKILL.
//
// How far a job is kept from the node and from other jobs is the
// Executor's Isolation (see Isolation for the contract of each mode):
//
//   - IsolationProcess: a process group of the node's own user. Nothing else
//     is isolated (ProcessModeGaps).
//   - IsolationSandbox (Linux, root): per attempt its own uid/gid, a cgroup
//     enforcing Limits (memory, pids, CPU weight; an OOM kills the job, not
//     the node), a mount namespace with a read-only system, hidden homes,
//     node data and other attempts, a /dev with only its own device nodes,
//     and a network namespace: none, egress to the public internet only, or
//     the node's; on none or egress, optionally an address on a network
//     of the job's own whose TCP the node carries (PrivateNet: a gang's
//     shares meet there, see node/gangnet).
//   - IsolationAuto: the sandbox where this node can provide it, else
//     process mode with a WARNING log.
//
// The supplier's Policy caps the Limits a job spec declares (Policy.Cap; the
// node's limitsOf does it for every attempt, after the market declined jobs
// declaring more than the caps);
// CardDevices turns the attempt's cards into the device nodes it may see;
// Capabilities tells the node what its executor enforces.
//
// The Executor owns one goroutine per running attempt (the one that waits
// for the process); Close stops every attempt and returns after those
// goroutines have exited.
//
//	ex, err := executor.New(executor.Config{
//		Root:       dataDir + "/attempts",
//		Isolation:  executor.IsolationAuto,
//		HideDirs:   []string{dataDir},
//		BlockPorts: []int{apiPort, meshPort},
//		Logger:     log,
//	})
//	limits, err := policy.Cap(spec.Limits) // refuse the job (no bid) on error
//	limits.Devices = executor.CardDevices("", cards)
//	run, err := ex.Start(executor.Attempt{JobID: id, Share: 0, Epoch: 1, Command: argv,
//		DeviceEnv: env, Limits: limits})
//	<-run.Done()
//	res := run.Result() // res.OOMKilled: the job hit its memory limit
//	ex.Close()
//
// Logs stay readable with ReadLog after the attempt, after Close and after
// a restart of the node.
package executor
