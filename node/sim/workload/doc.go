// Package workload reads and makes the workloads that gpumesh's simulations
// run: GPU cluster job traces (when each job arrives, how many cards it
// wants, how long it runs) and node availability traces (when each
// supplier is up), both in a simple CSV, and synthetic ones drawn from
// published distributions.
//
// Job traces have a header naming at least submit_s, gpus and duration_s
// (seconds; any order; gpu_model, status and unknown columns are kept or
// ignored), one job per line, '#' comments:
//
//	submit_s,gpus,duration_s,gpu_model,status
//	0,1,2323172,unknown,unknown
//	364815,8,4842984,unknown,unknown
//
// Availability traces have a header naming node, up_s and down_s, one
// up-session per line; an empty down_s means the node stays up:
//
//	node,up_s,down_s
//	home-7,0,1800
//	home-7,2400,
//
// Every error names the file, the line and the column that is wrong
// (*ParseError). The usage loop:
//
//	tr, err := workload.LoadJobs("jobs.csv")          // or workload.Philly("ee9e8c")
//	tr = tr.Window(0, 6*time.Hour).Scale(1.0 / 60)    // the first 6 h, 60× faster
//	for _, j := range tr.Jobs { submit(j.Submit, j.GPUs, j.Duration) }
//
// Generate makes a job trace from the published figures of the Philly,
// Helios and Acme traces (see Synthetic); Sessions makes an availability
// trace from a mean time between failures and a mean time to repair.
package workload
