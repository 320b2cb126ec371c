package node

import (
	"testing"

	"github.com/gpumesh/gpumesh/market"
)

// Which of two records of one job a node keeps: an end beats every record
// of the job still going, whatever the terms (a successor that adopted a
// stale replica, or a restarted coordinator that resumed its own old
// record, holds a higher term than the coordinator that recorded the end);
// otherwise the coordinator that outranks, then the version.
func TestNewerKeepsAnEndedJobEnded(t *testing.T) {
	rec := func(state market.JobState, term uint64, coord string, version uint64) market.JobRecord {
		return market.JobRecord{ID: "j1", State: state, Term: term, Coordinator: coord, Version: version}
	}
	for _, c := range []struct {
		name     string
		rec, old market.JobRecord
		want     bool
	}{
		{"an end at term 1 beats a stale copy running at term 4", rec(market.JobSucceeded, 1, "p", 113), rec(market.JobRunning, 4, "q", 2), true},
		{"a copy running at term 4 does not replace the end at term 1", rec(market.JobRunning, 4, "q", 2), rec(market.JobSucceeded, 1, "p", 113), false},
		{"a cancel beats a running copy of the same coordinator's older version", rec(market.JobCancelled, 2, "p", 5), rec(market.JobRunning, 2, "p", 9), true},
		{"a record of the job moving on is no end", rec(market.JobMoved, 5, "q", 1), rec(market.JobRunning, 2, "p", 9), true},
		{"the ended record is not replaced by a move", rec(market.JobMoved, 5, "q", 1), rec(market.JobFailed, 2, "p", 9), false},
		{"a higher term wins between two records still going", rec(market.JobRunning, 3, "a", 1), rec(market.JobRunning, 2, "z", 50), true},
		{"the greater peer ID wins at one term", rec(market.JobRunning, 2, "z", 1), rec(market.JobRunning, 2, "a", 50), true},
		{"the higher version wins at one coordinator and term", rec(market.JobRunning, 2, "a", 7), rec(market.JobRunning, 2, "a", 6), true},
		{"the same version is not newer", rec(market.JobRunning, 2, "a", 7), rec(market.JobRunning, 2, "a", 7), false},
		{"between two ends the coordinator that outranks wins", rec(market.JobSucceeded, 3, "a", 1), rec(market.JobSucceeded, 2, "z", 50), true},
	} {
		if got := newer(c.rec, c.old); got != c.want {
			t.Errorf("%s: newer = %v, want %v", c.name, got, c.want)
		}
	}
}
