// Package fence kills a node's job attempts when the node can no longer do
// it itself: a small keeper process, one per node, holds a deadline per
// attempt and kills the attempt's process group (and cgroup) when the node
// stops moving the deadline.
//
// # Why
//
// A runner keeps an attempt alive only while the job's coordinator
// acknowledges its lease renewals; past market.Config.LostAfter without an
// ack the coordinator places the share elsewhere, and the runner is meant to
// have killed its own attempt by then (self-fencing). A node that is frozen
// (SIGSTOP, a hung daemon, a machine paused under it) or killed with SIGKILL
// kills nothing: its attempts run on while the share runs again elsewhere,
// the same share twice. The keeper is the part of the node that survives
// those: it lives in a process group of its own, so signals to the node's
// process or group do not reach it, it needs nothing from the node to fence
// on time, and it sees the node's death as the end of its stdin (the node
// holds the only write end of that pipe).
//
// # Usage
//
// The binary hands the hidden subcommand to Main before it parses flags:
//
//	if len(os.Args) == 2 && os.Args[1] == fence.Subcommand {
//		os.Exit(fence.Main(os.Stdin, os.Stdout))
//	}
//
// The node starts one keeper and arms each attempt from the moment it starts,
// again on every acknowledged renewal, and disarms it when the attempt ends
// or the node stops it:
//
//	argv, err := fence.Command()
//	k, err := fence.Start(argv, log) // on error: run with fence.Nop{} and say so
//	defer k.Close()                   // clean shutdown: the keeper kills nothing
//	k.Arm(key, pgid, cgroupDir, within) // at start, and on every ack
//	k.Disarm(key)                       // the attempt exited or was stopped
//	for key := range k.Fenced() { ... } // attempts the keeper killed
//
// key names the attempt (job/share/epoch), pgid its process group, cgroupDir
// its cgroup v2 directory or "". within must end before the coordinator
// moves the share (LostAfter after the last ack), less a margin for the pipe
// and the kill: the keeper counts from when it reads the command.
//
// # Protocol
//
// Lines of printable ASCII, fields separated by exactly one space, each line
// ending in "\n" and at most MaxLine bytes long, newline included.
// Node to keeper (stdin):
//
//	prearm KEY MILLIS               as arm, for an attempt about to start (below)
//	arm KEY PGID CGROUPDIR MILLIS   kill unless armed again within MILLIS of receipt
//	disarm KEY                      forget KEY (not armed: no error)
//	close                           exit 0, killing nothing
//
// KEY is 1 to MaxKeyLen bytes without spaces; PGID is a decimal above 1 (0
// and 1 would mean the keeper's own group and every process); CGROUPDIR is a
// clean absolute path, or "-" for none; MILLIS is a decimal from 0 to
// MaxWithin, counted on the keeper's monotonic clock from when it read the
// line. Arming a key again replaces its group, cgroup and deadline. At most
// MaxKeys keys are armed at once. The keeper refuses to arm its own or its
// parent's process group.
//
// The node prearms an attempt just before it starts the attempt's process
// and arms it, with its group, just after: a node frozen (or killed) in
// between has told the keeper nothing of a process that runs. A key whose
// deadline passes while only prearmed is fenced by what the keeper finds
// in /proc (Linux): every process whose environment holds
// GPUMESH_ATTEMPT=KEY (AttemptEnv, set by the node's executor for each
// attempt) is killed, with the process group it is in, but the keeper's
// and the node's own.
//
// Keeper to node (stdout):
//
//	ready 1        the first line: the keeper runs, speaking protocol 1
//	fenced KEY     KEY's deadline passed: SIGKILL went to -PGID and "1" to
//	               CGROUPDIR/cgroup.kill (when set and present), KEY is forgotten
//	error TEXT     a line was malformed, over a limit or refused, or a kill
//	               failed; nothing else changed
//
// When stdin ends or fails without close, the node is gone: the keeper kills
// every armed attempt the same way, writes nothing, and exits 1.
//
// The keeper never blocks on the node: events wait in a bounded queue and are
// dropped, counted, when a frozen node does not read them. The client never
// blocks on the keeper for long: see Keeper for what happens to a keeper
// that stops reading.
//
// # What it does not cover
//
//   - The keeper killed with the node: SIGKILL to both (kill -9 -1, killall -9
//     gpumesh, which matches the keeper's command line too, the OOM killer)
//     and the attempts survive. Other signals do not end the keeper: it
//     ignores SIGHUP, SIGINT, SIGTERM and SIGPIPE. (Under systemd,
//     KillMode=control-group kills the whole unit, attempts whose cgroup is
//     inside it included, so there nothing survives.)
//   - The keeper frozen with the node: a cgroup freezer or a paused machine
//     or container stops both, and nothing fences until they thaw.
//   - A process group ID reused after the node reaped an attempt's leader
//     and froze before it disarmed the key: the keeper would kill the
//     newcomer. A group ID is not reused while any process, a zombie leader
//     included, still carries it, so the window is the node's own, between
//     wait and Disarm.
//   - A prearmed attempt where there is no /proc (macOS, the BSDs): a node
//     frozen between the process's start and its arm leaves the process to
//     run until the node resumes. A process that rewrote its environment,
//     or left it behind in a child started with another, is not found by
//     it either.
//   - Platforms without process groups (Windows): Start returns an error
//     wrapping errors.ErrUnsupported; the node runs with Nop.
package fence
