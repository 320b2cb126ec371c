// Package jobstate holds what a node knows of the job records it
// coordinates or replicates, apart from the disk and the market:
//
//   - View: the records as the node last wrote them (its own coordination,
//     and the replicas it holds), and the jobs submitted through it; Newer
//     says which of two records of one job supersedes the other (an end
//     always does).
//   - Decided: the node's own records as its driver decided them, ahead of
//     the View until they are written.
//   - Gate: the messages and executions that wait until every replica
//     holds the record that decided them (their commit), in order per
//     attempt; Mark orders a coordinator's records of a job.
//   - Queue: the records waiting to go to their replicas, one in flight
//     per job, and which replica acknowledged what.
//   - Ballot: a would-be or actual coordinator and its term, as a claim
//     grants it; Adopting marks the jobs a node is claiming now.
//
// The node drives these from its goroutines (the driver, the API, the
// replication loop) and does the I/O around them: it writes, sends and
// claims, and tells these types what came of it. Every type here is safe
// for concurrent use (Mark and Ballot are values), and none starts a
// goroutine, reads a clock or does I/O: times come in as arguments.
package jobstate
