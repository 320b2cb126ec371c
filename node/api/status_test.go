package api

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestMeshStatusAddCards(t *testing.T) {
	var m MeshStatus
	m.AddCards(Capacity{Model: "rtx4090-48g", Vendor: "nvidia", Free: 1, Busy: 1})
	m.AddCards(Capacity{Model: "h100-sxm-80g", Vendor: "nvidia", Free: 4, Reserved: 2, Busy: 2})
	m.AddCards(Capacity{Model: "mtt-s4000-48g", Vendor: "mthreads", Free: 3})
	m.AddCards(Capacity{Model: "h100-sxm-80g", Vendor: "nvidia", Busy: 8})

	if want := (Capacity{Total: 21, Free: 8, Reserved: 2, Busy: 11}); m.Cards != want {
		t.Errorf("Cards = %+v, want %+v", m.Cards, want)
	}
	wantModels := []Capacity{
		{Model: "h100-sxm-80g", Vendor: "nvidia", Total: 16, Free: 4, Reserved: 2, Busy: 10},
		{Model: "mtt-s4000-48g", Vendor: "mthreads", Total: 3, Free: 3},
		{Model: "rtx4090-48g", Vendor: "nvidia", Total: 2, Free: 1, Busy: 1},
	}
	if !reflect.DeepEqual(m.ByModel, wantModels) {
		t.Errorf("ByModel = %+v\nwant %+v", m.ByModel, wantModels)
	}
	wantVendors := []Capacity{
		{Vendor: "mthreads", Total: 3, Free: 3},
		{Vendor: "nvidia", Total: 18, Free: 5, Reserved: 2, Busy: 11},
	}
	if !reflect.DeepEqual(m.ByVendor, wantVendors) {
		t.Errorf("ByVendor = %+v\nwant %+v", m.ByVendor, wantVendors)
	}
}

func TestMeshStatusAddRegion(t *testing.T) {
	var m MeshStatus
	m.AddRegion("cn-east", 8)
	m.AddRegion("", 1)
	m.AddRegion("cn-east", 2)
	want := []RegionCount{{Region: "", Members: 1, Cards: 1}, {Region: "cn-east", Members: 2, Cards: 10}}
	if !reflect.DeepEqual(m.Regions, want) {
		t.Errorf("Regions = %+v, want %+v", m.Regions, want)
	}
}

func TestMemberCountsAdd(t *testing.T) {
	var c MemberCounts
	for _, s := range []string{"alive", "alive", "suspect", "dead", "left", "zombie"} {
		ok := c.Add(s)
		if ok == (s == "zombie") {
			t.Errorf("Add(%q) = %v", s, ok)
		}
	}
	if want := (MemberCounts{Alive: 2, Suspect: 1, Dead: 1, Left: 1}); c != want || c.Total() != 5 {
		t.Errorf("counts = %+v (total %d), want %+v (total 5)", c, c.Total(), want)
	}
}

func TestStatusJSONFieldNames(t *testing.T) {
	// The CLI and the dashboard read these names; a rename breaks them.
	st := Status{Warnings: []string{}}
	st.Jobs.ByState = map[string]int{"running": 1}
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]map[string]any
	var top map[string]json.RawMessage
	json.Unmarshal(data, &top)
	for _, k := range []string{"at", "node", "mesh", "jobs", "gossip", "warnings"} {
		if _, ok := top[k]; !ok {
			t.Errorf("status JSON has no %q: %s", k, data)
		}
	}
	delete(top, "at")
	delete(top, "warnings")
	raw, _ := json.Marshal(top)
	json.Unmarshal(raw, &m)
	want := map[string][]string{
		"node":   {"peer_id", "version", "started_at", "uptime_seconds", "reachability", "coordinator", "cards"},
		"mesh":   {"members", "cards", "by_model", "by_vendor", "regions"},
		"jobs":   {"by_state", "reroutes", "placement"},
		"gossip": {"mesh_peers", "messages_per_second", "bytes_in_per_second", "bytes_out_per_second", "rejected", "ignored"},
	}
	for section, keys := range want {
		for _, k := range keys {
			if _, ok := m[section][k]; !ok {
				t.Errorf("status JSON %s has no %q: %s", section, k, data)
			}
		}
	}
}
