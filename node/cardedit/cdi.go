package cardedit

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpumesh/gpumesh/device"
)

// cdiVendors are the CDI vendor names ("nvidia.com" of
// "nvidia.com/gpu=0") of each vendor's specs.
var cdiVendors = map[device.Vendor][]string{
	device.VendorNVIDIA:    {"nvidia.com"},
	device.VendorAMD:       {"amd.com"},
	device.VendorHygon:     {"hygon.com", "hygon.cn"},
	device.VendorHuawei:    {"huawei.com"},
	device.VendorMThreads:  {"mthreads.com"},
	device.VendorKunlunxin: {"kunlunxin.com"},
}

// preferredClasses break a tie between devices of one name in several
// classes of a vendor ("nvidia.com/gpu=0" and "nvidia.com/vgpu=0").
var preferredClasses = []string{"gpu", "dcu", "npu", "xpu"}

// cdiDevices is what the CDI cache holds of one vendor: its devices by
// name ("0", "GPU-…"), each with its qualified names.
type cdiDevices map[string][]string

// vendorDevices reads the CDI cache's devices of vendor v.
func (e *Editor) vendorDevices(v device.Vendor) cdiDevices {
	out := cdiDevices{}
	for _, q := range e.cache.ListDevices() {
		vendor, _, name, err := parser.ParseQualifiedName(q)
		if err != nil || !contains(cdiVendors[v], vendor) {
			continue
		}
		out[name] = append(out[name], q)
	}
	return out
}

func contains(s []string, x string) bool {
	return indexOf(s, func(y string) bool { return y == x }) >= 0
}

// resolve names card c's CDI device: the one named by its UUID, else by
// its index, else by its PCI bus id.
func (d cdiDevices) resolve(c device.Card) (string, error) {
	for _, name := range []string{c.UUID, strconv.Itoa(c.Index), c.PCIBusID} {
		qs := d[name]
		if name == "" || len(qs) == 0 {
			continue
		}
		if len(qs) == 1 {
			return qs[0], nil
		}
		for _, class := range preferredClasses {
			for _, q := range qs {
				if _, cl, _, _ := parser.ParseQualifiedName(q); cl == class {
					return q, nil
				}
			}
		}
		return "", fmt.Errorf("card %s is %s in CDI specs: which one is ambiguous", c.ID, strings.Join(qs, " and "))
	}
	return "", fmt.Errorf("card %s (index %d) is in no CDI spec", c.ID, c.Index)
}

// cdiEdits are the edits of cards (all of vendor v) through the CDI
// specs: the CDI library applies the specs' and the devices' edits to an
// OCI spec, which is read back. forbidden are the device nodes (under the
// dev dir) of cards the job was not given: edits that name one are
// refused. The error says why the cards cannot enter through CDI.
func (e *Editor) cdiEdits(v device.Vendor, cards []device.Card, forbidden map[string]bool) (*Edits, string, error) {
	if e.cache == nil {
		return nil, "", errors.New("CDI is off on this node")
	}
	devs := e.vendorDevices(v)
	if len(devs) == 0 {
		why := fmt.Sprintf("no CDI spec in %s names %s devices", strings.Join(e.cfg.CDIDirs, " or "), strings.Join(cdiVendors[v], " or "))
		if errs := e.cache.GetErrors(); len(errs) > 0 {
			why += " (" + specErrors(errs) + ")"
		}
		return nil, "", errors.New(why)
	}
	var names []string
	for _, c := range cards {
		q, err := devs.resolve(c)
		if err != nil {
			return nil, "", err
		}
		if !contains(names, q) {
			names = append(names, q)
		}
	}
	oci := &specs.Spec{Process: &specs.Process{}, Linux: &specs.Linux{}}
	if _, err := e.cache.InjectDevices(oci, names...); err != nil {
		return nil, "", fmt.Errorf("applying CDI devices %s: %w", strings.Join(names, ", "), err)
	}
	// The host's node of each device of the edits (the OCI spec keeps
	// only the container's path), and the files the specs came from.
	hostOf := map[string]string{}
	var files []string
	for _, q := range names {
		d := e.cache.GetDevice(q)
		if d == nil {
			return nil, "", fmt.Errorf("CDI device %s vanished while being applied", q)
		}
		for _, n := range append(append([]*cdispecs.DeviceNode(nil), d.GetSpec().ContainerEdits.DeviceNodes...), d.ContainerEdits.DeviceNodes...) {
			host := n.HostPath
			if host == "" {
				host = n.Path
			}
			hostOf[n.Path] = host
		}
		if p := d.GetSpec().GetPath(); !contains(files, p) {
			files = append(files, p)
		}
	}
	out := &Edits{Env: oci.Process.Env, Groups: oci.Process.User.AdditionalGids}
	if oci.Hooks != nil {
		out.Hooks = oci.Hooks
	}
	if oci.Linux.IntelRdt != nil || len(oci.Linux.NetDevices) > 0 {
		return nil, "", fmt.Errorf("CDI devices %s ask for Intel RDT or network devices, which gpumesh does not give", strings.Join(names, ", "))
	}
	for _, d := range oci.Linux.Devices {
		host := filepath.Clean(hostOf[d.Path])
		name := strings.TrimPrefix(path.Clean(d.Path), "/dev/")
		switch {
		case !path.IsAbs(d.Path) || !strings.HasPrefix(path.Clean(d.Path), "/dev/"):
			return nil, "", fmt.Errorf("CDI device node %s is not under /dev", d.Path)
		case !filepath.IsAbs(host):
			return nil, "", fmt.Errorf("CDI device node %s: host path %q is not absolute", d.Path, host)
		case forbidden[name] || forbidden[e.devName(host)]:
			return nil, "", fmt.Errorf("CDI devices %s would show %s, a card this job was not given", strings.Join(names, ", "), d.Path)
		}
		if fi, err := os.Stat(host); err != nil || fi.Mode()&os.ModeDevice == 0 {
			return nil, "", fmt.Errorf("CDI device node %s: %s is not a device node on this node", d.Path, host)
		}
		out.Devices = append(out.Devices, Device{Path: path.Clean(d.Path), Host: host})
	}
	for _, m := range oci.Mounts {
		bind := m.Type == "bind" || m.Type == ""
		if !bind {
			return nil, "", fmt.Errorf("CDI mount at %s is of type %q: gpumesh binds files and directories only", m.Destination, m.Type)
		}
		if !path.IsAbs(m.Destination) || !filepath.IsAbs(m.Source) {
			return nil, "", fmt.Errorf("CDI mount %s at %s: want absolute paths", m.Source, m.Destination)
		}
		host, err := filepath.EvalSymlinks(m.Source)
		if err != nil {
			return nil, "", fmt.Errorf("CDI mount at %s: %w", m.Destination, err)
		}
		out.Mounts = append(out.Mounts, Mount{Host: host, Path: path.Clean(m.Destination)})
	}
	sort.Strings(files)
	return out, strings.Join(names, ", ") + " from " + strings.Join(files, ", "), nil
}

// devName is a host path's name under the dev dir ("nvidia1"), or "".
func (e *Editor) devName(host string) string {
	rel, err := filepath.Rel(e.cfg.DevDir, host)
	if err != nil || strings.HasPrefix(rel, "..") {
		return ""
	}
	return filepath.ToSlash(rel)
}

// specErrors says which spec files the CDI library could not read.
func specErrors(errs map[string][]error) string {
	var out []string
	for file, es := range errs {
		out = append(out, file+": "+errors.Join(es...).Error())
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// newCache opens the CDI cache of dirs, refreshed on demand only (no
// watcher goroutine).
func newCache(dirs []string) *cdi.Cache {
	c, _ := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	return c
}
