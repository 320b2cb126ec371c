package market

// Terms order the coordinators a job has had; epochs name the attempts at
// its shares. Two coordinators of one job can exist for a while — a
// successor took over while the old one was cut off, or the old one came
// back from a restart as the successor adopted the job — and the rules
// below keep what they do apart until the lower one yields:
//
//   - Coordinators are ordered by term, and at equal terms by peer ID
//     (Outranks): two nodes that adopt a job from the same record at the
//     same moment never both outrank each other.
//   - Each term has its own range of epochs: a coordinator of term t issues
//     epochs above (t-1)×EpochsPerTerm, so epochs of different terms never
//     collide, and an attempt is named by its epoch alone everywhere
//     (supplier, fencing, checkpoints, logs).

// EpochsPerTerm is the size of a term's range of epochs: term 1 issues
// epochs 1, 2, …; term 2 issues 1000001, 1000002, …. A term that issued
// them all (a million re-placements) would run into the next term's
// range; adopt refuses a record that did.
const EpochsPerTerm = 1_000_000

// firstEpoch is the epoch below the first one a coordinator of term issues.
func firstEpoch(term uint64) uint64 {
	if term == 0 {
		return 0
	}
	return (term - 1) * EpochsPerTerm
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
