package cardedit

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpumesh/gpumesh/device"
)

// Config configures an Editor. Every field has a default.
type Config struct {
	// CDIDirs are the directories of CDI specs; a device named in two
	// takes the later's. Default /etc/cdi, /var/run/cdi.
	CDIDirs []string
	// NoCDI gives every vendor the built-in edits, whatever CDI specs the
	// node has.
	NoCDI bool
	// Root is the node's file tree where the driver's files are looked
	// for. Default "/"; tests point it at a fake tree.
	Root string
	// DevDir is where the cards' device nodes are. Default Root/dev.
	DevDir string
	// SysDir is where sysfs is mounted (a card's DRM nodes are found
	// through its PCI device). Default Root/sys.
	SysDir string
}

func (c Config) withDefaults() Config {
	if c.CDIDirs == nil {
		c.CDIDirs = append([]string(nil), cdi.DefaultSpecDirs...)
	}
	if c.Root == "" {
		c.Root = "/"
	}
	if c.DevDir == "" {
		c.DevDir = filepath.Join(c.Root, "dev")
	}
	if c.SysDir == "" {
		c.SysDir = filepath.Join(c.Root, "sys")
	}
	return c
}

func (c Config) validate() error {
	for name, p := range map[string]string{"Root": c.Root, "DevDir": c.DevDir, "SysDir": c.SysDir} {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("cardedit: %s %q: want an absolute path", name, p)
		}
	}
	for _, d := range c.CDIDirs {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("cardedit: CDI directory %q: want an absolute path", d)
		}
	}
	return nil
}

// Editor makes the edits of containers' cards. Its methods may be called
// from any goroutine; it starts none.
type Editor struct {
	cfg   Config
	cache *cdi.Cache // nil with NoCDI
}

// New returns an Editor; the error names a bad field of cfg.
func New(cfg Config) (*Editor, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	e := &Editor{cfg: cfg}
	if !cfg.NoCDI {
		e.cache = newCache(cfg.CDIDirs)
	}
	return e, nil
}

// For returns the edits of a container given cards: for each of their
// vendors through CDI where its specs name every one of the cards (and
// show no card of inventory the job was not given), else built in. env is
// the container's environment before the edits (the image's, then the
// job's variables: NVIDIA_DRIVER_CAPABILITIES picks the driver's files,
// LD_LIBRARY_PATH and PATH are extended). inventory is every card of the
// node. The CDI specs are read again on each call, so specs generated
// while the node runs count from the next container on.
func (e *Editor) For(cards, inventory []device.Card, env []string) (*Edits, error) {
	byVendor := map[device.Vendor][]device.Card{}
	given := map[string]bool{}
	for _, c := range cards {
		given[c.ID] = true
		if c.Backend != "sim" {
			byVendor[c.Vendor] = append(byVendor[c.Vendor], c)
		}
	}
	out := &Edits{}
	if len(byVendor) == 0 {
		return out, nil
	}
	forbidden := e.forbidden(cards, inventory, given)
	if e.cache != nil {
		_ = e.cache.Refresh() // a spec that cannot be read is reported by the vendor it would serve
	}
	vars := envMap(env)
	for _, v := range vendorsOf(byVendor) {
		vc := byVendor[v]
		edits, detail, err := e.cdiEdits(v, vc, forbidden)
		if err == nil {
			edits.Paths = []Path{{Vendor: v, Via: ViaCDI, Detail: detail}}
			for k, val := range envMap(edits.Env) {
				vars[k] = val
			}
		} else {
			edits = e.builtinEdits(v, vc, vars)
			edits.Paths = []Path{{Vendor: v, Via: ViaBuiltin, Detail: err.Error()}}
		}
		if err := out.add(edits); err != nil {
			return nil, err
		}
	}
	for _, d := range out.Devices {
		if forbidden[strings.TrimPrefix(d.Path, "/dev/")] || forbidden[e.devName(d.Host)] {
			return nil, fmt.Errorf("cardedit: %s is a card this job was not given", d.Path)
		}
	}
	out.sort()
	return out, nil
}

// forbidden are the exclusive device nodes of the inventory's cards that
// are not given.
func (e *Editor) forbidden(cards, inventory []device.Card, given map[string]bool) map[string]bool {
	own := map[string]bool{}
	for _, c := range cards {
		for _, n := range nodesOf(e.cfg.DevDir, e.cfg.SysDir, c).exclusive {
			own[n] = true
		}
	}
	out := map[string]bool{}
	for _, c := range inventory {
		if given[c.ID] {
			continue
		}
		for _, n := range nodesOf(e.cfg.DevDir, e.cfg.SysDir, c).exclusive {
			if !own[n] {
				out[n] = true
			}
		}
	}
	return out
}

// Paths says, for each vendor of the node's cards (simulated ones aside),
// how its cards enter containers: through CDI when the specs name every
// one of them, else built in (and why). Sorted by vendor.
func (e *Editor) Paths(inventory []device.Card) []Path {
	byVendor := map[device.Vendor][]device.Card{}
	for _, c := range inventory {
		if c.Backend != "sim" {
			byVendor[c.Vendor] = append(byVendor[c.Vendor], c)
		}
	}
	if e.cache != nil && len(byVendor) > 0 {
		_ = e.cache.Refresh()
	}
	var out []Path
	for _, v := range vendorsOf(byVendor) {
		if _, detail, err := e.cdiEdits(v, byVendor[v], nil); err == nil {
			out = append(out, Path{Vendor: v, Via: ViaCDI, Detail: detail})
		} else {
			out = append(out, Path{Vendor: v, Via: ViaBuiltin, Detail: err.Error()})
		}
	}
	return out
}

// vendorsOf returns the map's vendors, sorted.
func vendorsOf(m map[device.Vendor][]device.Card) []device.Vendor {
	out := make([]device.Vendor, 0, len(m))
	for v := range m {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
