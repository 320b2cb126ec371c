package node

import "time"

// attemptsPruneInterval is how often the directories of ended attempts
// are swept: those older than the executor's KeepLogs go, logs and all.
const attemptsPruneInterval = 10 * time.Minute

// attemptsJanitor prunes the attempts' directories when the node starts
// (what its last run left) and every attemptsPruneInterval, until the
// node closes. An attempt's work directory goes as soon as its outputs
// are kept (runAttempt); its logs, which `gpumesh logs` reads, stay for
// KeepLogs.
func (n *Node) attemptsJanitor() {
	defer n.wg.Done()
	keep := n.exec.Config().KeepLogs
	t := time.NewTicker(attemptsPruneInterval)
	defer t.Stop()
	now := time.Now()
	for {
		removed, err := n.exec.Prune(now.Add(-keep))
		if removed > 0 {
			n.log.Info("removed the directories of attempts that ended long ago", "attempts", removed, "older_than", keep)
		}
		if err != nil {
			n.log.Warn("attempt directories not pruned", "err", err)
		}
		select {
		case <-n.ctx.Done():
			return
		case now = <-t.C:
		}
	}
}
