package procbench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// series is one node's /metrics: each sample's value by its series, the
// name with its labels as the node printed them (`gpumesh_members{state="alive"}`).
type series map[string]float64

// sum adds the samples of metric name whose labels contain every one of
// labels (`state="reserved"`).
func (s series) sum(name string, labels ...string) float64 {
	var v float64
	for k, x := range s {
		base, rest, _ := strings.Cut(k, "{")
		if base != name {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				ok = false
				break
			}
		}
		if ok {
			v += x
		}
	}
	return v
}

// scrape reads p's /metrics, with the nodes' API token.
func (c *cluster) scrape(ctx context.Context, p *proc) (series, error) {
	var s series
	err := c.readMetrics(ctx, p, func(r io.Reader) (err error) {
		s, err = parseSeries(r)
		return err
	})
	return s, err
}

// readMetrics GETs p's /metrics with the nodes' API token and hands the
// body to parse; its errors name the node.
func (c *cluster) readMetrics(ctx context.Context, p *proc, parse func(io.Reader) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.api+"/metrics", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.admin)
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: /metrics: %s", p.name, resp.Status)
	}
	if err := parse(resp.Body); err != nil {
		return fmt.Errorf("%s: /metrics: %w", p.name, err)
	}
	return nil
}

// parseSeries reads the gpumesh_* samples of a Prometheus text exposition.
func parseSeries(r io.Reader) (series, error) {
	out := series{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "gpumesh_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("line %q: no value", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}
