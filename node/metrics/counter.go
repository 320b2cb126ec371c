package metrics

import "github.com/prometheus/client_golang/prometheus"

// sendCounter sends a counter's value read at scrape time, for the
// collectors that read their sources then (gossip, network, membership,
// status).
func sendCounter[T int64 | uint64](ch chan<- prometheus.Metric, d *prometheus.Desc, v T, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}
