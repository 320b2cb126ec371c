package market

import "hash/fnv"

// Terms order the coordinators a job has had; epochs name the attempts at
// its shares. Two coordinators of one job can exist for a while — a
// successor took over while the old one was cut off, or the old one came
// back from a restart as the successor adopted the job — and the rules
// below keep what they do apart until the lower one yields:
//
//   - Coordinators are ordered by term, and at equal terms by peer ID
//     (Outranks): two nodes that adopt a job from the same record at the
//     same moment never both outrank each other.
//   - Each term has its own range of epochs, and within it each
//     coordinator a slot of its own, drawn from its peer ID: a coordinator
//     of term t issues epochs above (t-1)×EpochsPerTerm + slot×EpochsPerSlot.
//     Epochs of different terms never collide, and two coordinators that
//     adopted a job at the same term (acting on different membership views
//     at the same instant) collide only if their slots do (1 in
//     EpochsPerTerm/EpochsPerSlot). An attempt is named by its epoch alone
//     everywhere (supplier, fencing, checkpoints, logs).

// EpochsPerTerm is the size of a term's range of epochs, and EpochsPerSlot
// the size of a coordinator's slot within it: term 1 (the coordinator the
// job was submitted to) issues epochs 1, 2, …; a coordinator of term 2 in
// slot 417 issues 1417000001, 1417000002, …. A coordinator that issued a
// million epochs in one term (a million re-placements) would run into the
// next slot; adopt refuses a record that reached the next term's range.
const (
	EpochsPerTerm = 1_000_000_000
	EpochsPerSlot = 1_000_000
)

// firstEpoch is the epoch below the first one coordinator issues at term.
func firstEpoch(term uint64, coordinator string) uint64 {
	if term <= 1 {
		return 0
	}
	return (term-1)*EpochsPerTerm + epochSlot(coordinator)*EpochsPerSlot
}

// epochSlot is a coordinator's slot: its peer ID hashed (FNV-1a) into
// EpochsPerTerm/EpochsPerSlot slots.
func epochSlot(coordinator string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(coordinator))
	return h.Sum64() % (EpochsPerTerm / EpochsPerSlot)
}

// EpochTerm returns the term that issued epoch.
func EpochTerm(epoch uint64) uint64 {
	if epoch == 0 {
		return 0
	}
	return (epoch-1)/EpochsPerTerm + 1
}

// Outranks reports whether a coordinator of term t1 with peer ID c1
// outranks one of term t2 with peer ID c2: a higher term, or the same term
// and the greater peer ID. A coordinator never outranks itself.
func Outranks(t1 uint64, c1 string, t2 uint64, c2 string) bool {
	return t1 > t2 || t1 == t2 && c1 > c2
}
