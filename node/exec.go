package node

import (
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/executor"
	"github.com/gpumesh/gpumesh/node/image"
	"github.com/gpumesh/gpumesh/node/metrics"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// runSlot is the driver's handle on one attempt between the market's
// decision to start it and the end of its process.
type runSlot struct {
	mu      sync.Mutex
	run     *executor.Run
	stop    executor.StopReason // asked before the process existed
	stopped chan struct{}       // closed when stop is set
	fence   fenceState          // what the keeper was told (fencing.go)
	// decided is when the driver decided to start the attempt: what its
	// fence counts from until a tick saw its lease (armStarted).
	decided time.Time
}

func attemptName(job string, share int, epoch uint64) string {
	return executor.Attempt{JobID: job, Share: share, Epoch: epoch}.Name()
}

// startExecution starts one share on this node's cards. Preparing it (the
// payload may come from its holders) happens on a goroutine the node owns,
// which then watches the process and reports its end.
func (n *Node) startExecution(e market.Execution) {
	key := attemptKey{e.Job, e.Share, e.Epoch}
	if _, ok := n.runs[key]; ok {
		return
	}
	slot := &runSlot{stopped: make(chan struct{}), decided: time.Now()}
	n.runs[key] = slot
	var master string
	if e.Gang != nil && e.Gang.NNodes > 1 && !onPrivateNet(e) {
		master = n.masterAddr(e.Gang.Master)
	}
	// An attempt of a job this node coordinates itself starts once the
	// job's replicas hold the record that placed it, as an award to
	// another node leaves only then (commit.go).
	var committed <-chan struct{}
	if e.Coordinator == n.self {
		switch need, wait, superseded := n.commitNeeded(e.Job); {
		case superseded:
			// Decided as the job's coordinator, which a replica holder
			// has since said another outranks (gateOut): it waits for
			// the stop that comes when no ack does. No coordinator acks
			// it: this node lets the job go, and the one that outranks it
			// claimed the job before this decision, so no record it
			// adopted holds the attempt (commit.go).
			committed = make(chan struct{})
		case wait:
			committed = n.gate.Await(e.Job, need)
		}
	}
	n.wg.Add(1)
	go n.runAttempt(key, e, slot, master, committed)
}

func (n *Node) runAttempt(key attemptKey, e market.Execution, slot *runSlot, master string, committed <-chan struct{}) {
	defer n.wg.Done()
	log := n.log.With("job", e.Job, "share", e.Share, "epoch", e.Epoch)
	if committed != nil {
		select {
		case <-committed:
		case <-slot.stopped:
			log.Info("attempt stopped before its placement reached the job's replicas; not started")
			n.postWait(func() {
				delete(n.runs, key)
				n.step(market.ExecutionExited{Now: time.Now(), Job: e.Job, Share: e.Share, Epoch: e.Epoch, ExitCode: -1})
			})
			return
		case <-n.ctx.Done():
			return
		}
	}
	secrets, err := n.fetchSecrets(e)
	var a executor.Attempt
	var root *image.Root
	if err == nil {
		a, root, err = n.attemptOf(e, master, secrets)
	}
	var run *executor.Run
	if err == nil {
		a.Starting = func() { n.prearm(key, slot, slot.decided) }
		a.Started = func(pgid int, cgroup string) { n.armStarted(key, slot, pgid, cgroup, slot.decided) }
		startAt := time.Now()
		run, err = n.exec.Start(a)
		n.stages.Since(metrics.StageStart, startAt)
		if err != nil && root != nil {
			root.Release()
		}
	}
	if err != nil {
		// The owner reads why in the job's stderr and in its record, not
		// only in this node's log.
		n.unprearm(key, slot)
		why := strings.TrimPrefix(err.Error(), "executor: ")
		log.Warn("attempt did not start", "err", err)
		if werr := n.exec.StartFailed(executor.Attempt{JobID: e.Job, Share: e.Share, Epoch: e.Epoch}, why); werr != nil {
			log.Warn("the attempt's stderr does not say why it did not start", "err", werr)
		}
		notStarted := isNotStarted(err)
		n.postWait(func() {
			delete(n.runs, key)
			n.step(market.ExecutionStarted{Now: time.Now(), Job: e.Job, Share: e.Share, Epoch: e.Epoch})
			n.step(market.ExecutionExited{Now: time.Now(), Job: e.Job, Share: e.Share, Epoch: e.Epoch, ExitCode: exitCannotStart,
				Reason: "did not start: " + why, NotStarted: notStarted})
		})
		return
	}
	if root != nil {
		defer root.Release() // once the attempt is over (below)
	}
	inGang := a.Private != nil
	if inGang {
		if err := n.joinGang(e, run); err != nil {
			// The roster was checked before; nothing else fails here.
			log.Error("the attempt's private network is not carried: stopping it", "err", err)
			run.Stop(executor.StopCancelled)
			inGang = false
		}
	}
	slot.mu.Lock()
	slot.run = run
	stop := slot.stop
	slot.mu.Unlock()
	if stop != "" {
		run.Stop(stop)
	}
	started := run.StartedAt()
	n.postWait(func() {
		n.step(market.ExecutionStarted{Now: started, Job: e.Job, Share: e.Share, Epoch: e.Epoch})
	})
	<-run.Done() // the executor stops every run when the node closes
	if inGang {
		n.leaveGang(e)
	}
	// The job wrote its last checkpoint on SIGTERM: offer it before the
	// coordinator hears the attempt is over.
	n.shipCheckpoint(run)
	why := n.sendOutputs(log, e, secrets, run.WorkDir())
	outputs := n.keepOutputs(log, e, run.WorkDir())
	if err := n.exec.Tidy(run.Attempt().Name()); err != nil {
		log.Warn("the attempt's working directory stays on disk", "err", err)
	}
	res := run.Result()
	fenced := n.disarm(key, slot, res.EndedAt)
	log.Info("attempt ended", "exit_code", res.ExitCode, "stopped", string(res.Stopped), "oom_killed", res.OOMKilled, "seconds", res.Seconds(), "fenced", fenced)
	n.postWait(func() {
		delete(n.runs, key)
		n.step(market.ExecutionExited{Now: res.EndedAt, Job: e.Job, Share: e.Share, Epoch: e.Epoch, ExitCode: res.ExitCode, Fenced: fenced,
			Reason: why, Outputs: outputs})
	})
}

// exitCannotStart is the exit code reported for an attempt whose process
// could not be started (command not found, payload unavailable), as a
// shell reports a command it cannot run.
const exitCannotStart = 127

// stopExecution stops an attempt; its watcher reports the end.
func (n *Node) stopExecution(s market.StopExecution) {
	key := attemptKey{s.Job, s.Share, s.Epoch}
	slot, ok := n.runs[key]
	if !ok {
		// Never started here, or already gone: tell the market at once.
		n.step(market.ExecutionExited{Now: time.Now(), Job: s.Job, Share: s.Share, Epoch: s.Epoch, ExitCode: -1})
		return
	}
	reason := stopReason(s.Cause)
	if s.By != "" {
		// A coordinator's Stop: who asked and why, for whoever reads why
		// an attempt ended early.
		n.log.Info("stopping attempt", "job", s.Job, "share", s.Share, "epoch", s.Epoch, "by", s.By, "why", s.Reason)
	}
	slot.mu.Lock()
	run := slot.run
	if run == nil && slot.stop == "" {
		slot.stop = reason
		close(slot.stopped)
	}
	slot.mu.Unlock()
	if run != nil {
		run.Stop(reason)
	}
}

func stopReason(c market.Cause) executor.StopReason {
	switch c {
	case market.CausePreempted:
		return executor.StopPreempted
	case market.CauseFenced:
		return executor.StopFenced
	}
	return executor.StopCancelled
}

// attemptOf builds what the executor runs for an execution; secrets (the
// job's, from their holder) join its environment; root, for a job in an
// image, is its root file system, to release once the attempt is over.
func (n *Node) attemptOf(e market.Execution, master string, secrets map[string]string) (a executor.Attempt, root *image.Root, err error) {
	inventory := n.devices.Cards()
	byID := make(map[string]device.Card, len(inventory))
	for _, c := range inventory {
		byID[c.ID] = c
	}
	cards := make([]device.Card, 0, len(e.Cards))
	for _, id := range e.Cards {
		c, ok := byID[id]
		if !ok {
			return a, nil, fmt.Errorf("card %s is no longer on this node", id)
		}
		cards = append(cards, c)
	}
	a = executor.Attempt{
		JobID:      e.Job,
		Share:      e.Share,
		Epoch:      e.Epoch,
		Command:    e.Exec.Command,
		Env:        withSecrets(e.Exec.Env, secrets),
		DeviceEnv:  envMap(device.VisibleEnv(cards, inventory)),
		LocalCards: len(cards),
	}
	if a.Limits, err = n.limitsOf(e, executor.CardDevices(n.cfg.Executor.DevDir, cards)); err != nil {
		return a, nil, err
	}
	if e.Gang != nil {
		if a.Gang, a.Private, err = gangOf(e, master); err != nil {
			return a, nil, err
		}
		if a.Private != nil {
			for i, m := range e.Gang.Members {
				if _, err := peer.Decode(m.Node); err != nil {
					return a, nil, fmt.Errorf("the gang's roster names a bad node at rank %d: %q", i, m.Node)
				}
			}
		}
	}
	a.Work = n.workInto(e, secrets)
	a.Checkpoint = n.restoreInto(e)
	if len(e.Exec.Images) > 0 {
		if a.Image, root, err = n.imageOf(e, cards); err != nil {
			return a, nil, err
		}
	}
	return a, root, nil
}

func envMap(kv []string) map[string]string {
	m := make(map[string]string, len(kv))
	for _, e := range kv {
		if k, v, ok := strings.Cut(e, "="); ok {
			m[k] = v
		}
	}
	return m
}

// masterPort is the rendezvous port of a gang attempt: derived from the job
// and epoch, so every rank computes the same one and two gangs mastered on
// one node rarely collide.
func masterPort(job string, epoch uint64) int {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s/%d", job, epoch)
	return 20000 + int(h.Sum32()%10000)
}

// masterAddr is the IP address other ranks use to reach the gang's master
// node: its first IPv4 address that is not loopback, else its first IPv6
// one, else loopback (a mesh on one machine).
func (n *Node) masterAddr(id string) string {
	pid, err := peer.Decode(id)
	if err != nil {
		return ""
	}
	var addrs []ma.Multiaddr
	if pid == n.id {
		addrs = n.mesh.Host().Addrs()
	} else if m, ok := n.mesh.Member(pid); ok {
		addrs = m.Addrs
	}
	var v6, loop string
	for _, a := range addrs {
		ip, err := manet.ToIP(a)
		switch {
		case err != nil || ip.IsUnspecified():
		case ip.IsLoopback():
			if loop == "" {
				loop = ip.String()
			}
		case ip.To4() != nil:
			return ip.String()
		case v6 == "":
			v6 = ip.String()
		}
	}
	if v6 != "" {
		return v6
	}
	return loop
}
