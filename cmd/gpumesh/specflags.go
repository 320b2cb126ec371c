package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gpumesh/gpumesh/device"
	"github.com/gpumesh/gpumesh/market"
)

// submitOptions are the flags of `gpumesh submit` that make the job spec.
type submitOptions struct {
	id          string
	name        string
	gpus        int
	models      []string
	vendors     []string
	minMem      string
	minCU       float64
	perNode     int
	oneNode     bool
	mixedModels bool
	allowSim    bool
	maxPrice    float64
	maxPriceSet bool // --max-price was given
	preemptible bool
	service     bool
	replicas    int
	replicasSet bool // --replicas was given
	port        int  // --port: the service's port
	readyPath   string
	public      bool
	elastic     string
	duration    time.Duration
	network     string
	memory      string
	pids        int
	cpuWeight   int
	env         []string
	images      []string // --image [VENDOR=]REF, as given
	command     []string
}

// specFlags names the flag behind each field of a job spec (top-level, or
// nested where a nested field has a flag of its own), for errors about the
// field from Validate or from the node. See flagFor.
var specFlags = map[string]string{
	"id":                 "--id",
	"name":               "--name",
	"cards":              "--gpus",
	"models":             "--model",
	"vendors":            "--vendor",
	"min_memory_mib":     "--min-mem",
	"min_compute_units":  "--min-cu",
	"layout":             "--per-node/--one-node",
	"layout.per_node":    "--per-node",
	"mixed_models":       "--mixed-models",
	"allow_simulated":    "--allow-simulated",
	"max_price_cny":      "--max-price",
	"kind":               "--preemptible/--service",
	"replicas":           "--replicas",
	"service":            "--port",
	"service.port":       "--port",
	"service.ready_path": "--ready-path",
	"service.public":     "--public",
	"expected_duration":  "--duration",
	"elastic":            "--elastic",
	"command":            "COMMAND",
	"images":             "--image",
	"env":                "--env",
	"payload":            "--payload",
	"data":               "--input/--output/--secret",
	"data.secrets":       "--secret",
	"network":            "--net",
	"memory_bytes":       "--memory",
	"pids":               "--pids",
	"cpu_weight":         "--cpu-weight",
	"owner":              "--key",
	"signature":          "--key",
}

// buildSpec turns the flags into a job spec checked against the catalog. It
// reports whether the max price was defaulted. Every error is a usage error
// naming the flag; nothing is sent anywhere.
//
// resolve turns each --image reference into one by digest (see
// resolveImages); it is called last, once every other flag is known good,
// and may be nil when no --image is given.
func buildSpec(o submitOptions, cat *device.Catalog, resolve imageResolver) (spec market.JobSpec, defaultedPrice bool, err error) {
	spec = market.JobSpec{ID: o.id, Name: o.name, Cards: o.gpus, MinComputeUnits: o.minCU, MixedModels: o.mixedModels, AllowSimulated: o.allowSim, Command: o.command}
	if o.gpus == 0 {
		return spec, false, usagef("--gpus: required: the number of cards, 1 to %d", market.MaxCards)
	}
	if len(o.command) == 0 && len(o.images) == 0 {
		return spec, false, usagef("no command: give the program and its arguments after --, as in: gpumesh submit --gpus 1 -- python train.py (or run an image's own command with --image REF)")
	}
	images, err := parseImageFlags(o.images)
	if err != nil {
		return spec, false, err
	}
	for _, m := range o.models {
		m = strings.TrimSpace(m)
		if m == "" {
			return spec, false, usagef("--model: empty model key")
		}
		spec.Models = append(spec.Models, m)
	}
	for _, v := range o.vendors {
		v = strings.ToLower(strings.TrimSpace(v))
		if v == "" {
			return spec, false, usagef("--vendor: empty vendor")
		}
		spec.Vendors = append(spec.Vendors, device.Vendor(v))
	}
	if o.minMem != "" {
		if spec.MinMemoryMiB, err = parseMiB(o.minMem); err != nil {
			return spec, false, usagef("--min-mem: %v", err)
		}
	}
	switch {
	case o.perNode != 0 && o.oneNode:
		return spec, false, usagef("--per-node and --one-node: give one layout, not both")
	case o.perNode < 0:
		return spec, false, usagef("--per-node: must be at least 1, got %d", o.perNode)
	case o.perNode > 0:
		spec.Layout = market.Layout{Mode: market.LayoutPerNode, PerNode: o.perNode}
	case o.oneNode:
		spec.Layout = market.Layout{Mode: market.LayoutOneNode}
	}
	switch {
	case o.preemptible && (o.service || o.replicasSet):
		return spec, false, usagef("--preemptible and --service/--replicas: a job is preemptible or a service, not both")
	case o.preemptible:
		spec.Kind = market.KindPreemptible
	case o.service || o.replicasSet:
		spec.Kind = market.KindService
		if o.replicasSet {
			if o.replicas < 1 {
				return spec, false, usagef("--replicas: must be at least 1, got %d", o.replicas)
			}
			spec.Replicas = o.replicas
		}
	}
	switch {
	case (o.readyPath != "" || o.public) && o.port == 0:
		return spec, false, usagef("--ready-path and --public need --port: the port the service listens on")
	case o.port != 0 && spec.Kind != market.KindService:
		return spec, false, usagef("--port: only a service has a port (add --service)")
	case o.port != 0:
		spec.Service = &market.ServiceSpec{Port: o.port, ReadyPath: o.readyPath, Public: o.public}
	}
	if o.elastic != "" {
		el, err := parseElastic(o.elastic)
		if err != nil {
			return spec, false, usagef("--elastic: %v", err)
		}
		spec.Elastic = &el
	}
	if o.duration < 0 {
		return spec, false, usagef("--duration: must not be negative, got %v", o.duration)
	}
	spec.ExpectedDuration = market.Duration(o.duration)
	if o.network != "" {
		n, err := market.ParseJobNetwork(o.network)
		if err != nil {
			return spec, false, usagef("--net: %v", err)
		}
		spec.Network = n
	}
	if o.memory != "" {
		if spec.MemoryBytes, err = parseBytes(o.memory); err != nil {
			return spec, false, usagef("--memory: %v", err)
		}
	}
	spec.Pids, spec.CPUWeight = o.pids, o.cpuWeight
	if spec.Env, err = parseEnv(o.env); err != nil {
		return spec, false, usagef("--env: %v", err)
	}
	if o.maxPriceSet {
		spec.MaxPriceCNY = o.maxPrice
	} else if defaultedPrice, err = spec.FillMaxPrice(cat); err != nil {
		return spec, false, specUsageError(err)
	}
	if len(images) > 0 {
		// Everything else is checked first: resolving asks registries.
		spec.Images = placeholderImages(images)
		if err := spec.Validate(cat); err != nil {
			return spec, false, specUsageError(err)
		}
		if spec.Images, err = resolveImages(images, resolve); err != nil {
			return spec, false, err
		}
	}
	if err := spec.Validate(cat); err != nil {
		return spec, false, specUsageError(err)
	}
	return spec, defaultedPrice, nil
}

// specUsageError names the flag behind a spec field error.
func specUsageError(err error) error {
	var se *market.SpecError
	if !errors.As(err, &se) {
		return usageError{err}
	}
	flag, exact := flagFor(specFlags, se.Field)
	switch {
	case flag == "":
		return usagef("%s: %s", se.Field, se.Msg)
	case exact:
		return usagef("%s: %s", flag, se.Msg)
	}
	return usagef("%s: %s: %s", flag, se.Field, se.Msg)
}

// flagFor finds the flag behind a field in flags: the field's own entry
// (exact), else its top-level field's.
func flagFor(flags map[string]string, field string) (flag string, exact bool) {
	if f, ok := flags[field]; ok {
		return f, true
	}
	return flags[fieldRoot(field)], false
}

// parseMiB reads a memory size such as 24GiB, 24G, 24gb, 24576MiB, 1.5TiB
// or 0 into MiB. The units are binary whatever their spelling (a "24 GB"
// card holds 24 GiB): M/MB/MiB, G/GB/GiB, T/TB/TiB, in any case. The size
// must come to whole MiB.
func parseMiB(s string) (uint64, error) {
	const want = "want a size such as 24GiB, 24G or 24576MiB"
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(t)
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		return 0, fmt.Errorf("%q: %s", s, want)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("%q: %s", s, want)
	}
	var mult float64
	switch unit {
	case "m", "mb", "mib":
		mult = 1
	case "g", "gb", "gib":
		mult = 1 << 10
	case "t", "tb", "tib":
		mult = 1 << 20
	case "":
		if v == 0 {
			return 0, nil
		}
		return 0, fmt.Errorf("%q: no unit; %s", s, want)
	default:
		return 0, fmt.Errorf("%q: unknown unit %q; %s", s, strings.TrimSpace(t[i:]), want)
	}
	mib := v * mult
	if mib > 1<<40 {
		return 0, fmt.Errorf("%q: too large", s)
	}
	if mib != math.Trunc(mib) {
		return 0, fmt.Errorf("%q is not a whole number of MiB", s)
	}
	return uint64(mib), nil
}

// parseBytes reads a size as parseMiB does, into bytes.
func parseBytes(s string) (int64, error) {
	mib, err := parseMiB(s)
	if err != nil {
		return 0, err
	}
	return int64(mib) << 20, nil
}

// parseElastic reads MIN:MAX.
func parseElastic(s string) (market.Elastic, error) {
	lo, hi, ok := strings.Cut(s, ":")
	if !ok {
		return market.Elastic{}, fmt.Errorf("%q: want MIN:MAX, such as 4:16", s)
	}
	minCards, err1 := strconv.Atoi(strings.TrimSpace(lo))
	maxCards, err2 := strconv.Atoi(strings.TrimSpace(hi))
	if err1 != nil || err2 != nil {
		return market.Elastic{}, fmt.Errorf("%q: want two whole numbers MIN:MAX, such as 4:16", s)
	}
	return market.Elastic{Min: minCards, Max: maxCards}, nil
}

// parseEnv reads NAME=VALUE entries; a name given twice is an error.
func parseEnv(entries []string) (map[string]string, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	env := make(map[string]string, len(entries))
	for _, kv := range entries {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q: want NAME=VALUE", kv)
		}
		if _, dup := env[k]; dup {
			return nil, fmt.Errorf("%s given twice", k)
		}
		env[k] = v
	}
	return env, nil
}
