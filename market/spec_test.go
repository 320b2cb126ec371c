package market

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/device"
)

func validSpec() JobSpec {
	return JobSpec{ID: "j1", Cards: 8, MaxPriceCNY: 30, Command: []string{"python", "train.py"}}
}

func TestValidateAcceptsGoodSpecs(t *testing.T) {
	cat := device.DefaultCatalog()
	for name, mod := range map[string]func(*JobSpec){
		"minimal":     func(*JobSpec) {},
		"models":      func(s *JobSpec) { s.Models = []string{"h100-sxm-80g", "rtx4090-*", "x-tesla-t4-15g"} },
		"vendors":     func(s *JobSpec) { s.Vendors = []device.Vendor{device.VendorNVIDIA, device.VendorHuawei} },
		"gang":        func(s *JobSpec) { s.Cards, s.Layout = 32, Layout{Mode: LayoutPerNode, PerNode: 8} },
		"one node":    func(s *JobSpec) { s.Layout.Mode = LayoutOneNode },
		"service":     func(s *JobSpec) { s.Kind, s.Cards, s.Replicas = KindService, 2, 3 },
		"preemptible": func(s *JobSpec) { s.Kind = KindPreemptible },
		"elastic":     func(s *JobSpec) { s.Cards, s.Elastic = 1, &Elastic{Min: 1, Max: 1000} },
		"elastic gang": func(s *JobSpec) {
			s.Layout, s.Elastic = Layout{Mode: LayoutPerNode, PerNode: 4}, &Elastic{Min: 4, Max: 64}
		},
		"memory":   func(s *JobSpec) { s.MinMemoryMiB = 24 * 1024; s.Models = []string{"rtx4090-24g"} },
		"compute":  func(s *JobSpec) { s.MinComputeUnits = 3 },
		"duration": func(s *JobSpec) { s.ExpectedDuration = Duration(6 * time.Hour) },
		"payload": func(s *JobSpec) {
			s.Payload = &PayloadRef{Manifest: "sha256:" + strings.Repeat("ab", 32), Size: 45 << 30, Holder: "12D3KooWholder"}
		},
		"env": func(s *JobSpec) { s.Env = map[string]string{"NCCL_DEBUG": "INFO"} },
		"data": func(s *JobSpec) {
			s.Data = dataSpec(DataInput{From: "s3://datasets/imagenet/", To: "/data"}, DataInput{From: "s3://my.bucket", To: "."})
			s.Data.Outputs = []DataOutput{{From: "out", To: "s3://results/run-1"}}
		},
		"4096 cards":     func(s *JobSpec) { s.Cards = 4096 },
		"derived vendor": func(s *JobSpec) { s.Models = []string{"x-*"}; s.Vendors = []device.Vendor{device.VendorAMD} },
		"resources":      func(s *JobSpec) { s.Resources = Resources{MemoryBytes: 64 << 30, Pids: 20000, CPUWeight: 500} },
		"least resources": func(s *JobSpec) {
			s.Resources = Resources{MemoryBytes: MinJobMemoryBytes, Pids: MinJobPids, CPUWeight: 1}
		},
		"most resources": func(s *JobSpec) {
			s.Resources = Resources{MemoryBytes: MaxJobMemoryBytes, Pids: MaxJobPids, CPUWeight: MaxJobCPUWeight}
		},
	} {
		s := validSpec()
		mod(&s)
		if err := s.Validate(cat); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestValidateNamesTheBadField(t *testing.T) {
	cat := device.DefaultCatalog()
	cases := []struct {
		name  string
		mod   func(*JobSpec)
		field string
		msg   string // a substring of the message
	}{
		{"no id", func(s *JobSpec) { s.ID = "" }, "id", "required"},
		{"bad id", func(s *JobSpec) { s.ID = "Job 1" }, "id", "lower-case"},
		{"zero cards", func(s *JobSpec) { s.Cards = 0 }, "cards", "between 1 and 4096, got 0"},
		{"negative cards", func(s *JobSpec) { s.Cards = -3 }, "cards", "got -3"},
		{"too many cards", func(s *JobSpec) { s.Cards = 4097 }, "cards", "got 4097"},
		{"unknown model", func(s *JobSpec) { s.Models = []string{"h100-sxm"} }, "models[0]", "did you mean h100-sxm-80g"},
		{"pattern matches nothing", func(s *JobSpec) { s.Models = []string{"b200-*"} }, "models[0]", "matches no model"},
		{"bad pattern", func(s *JobSpec) { s.Models = []string{"h100-[*"} }, "models[0]", "bad pattern"},
		{"bad derived key", func(s *JobSpec) { s.Models = []string{"x-Tesla T4"} }, "models[0]", "derived key"},
		{"unknown vendor", func(s *JobSpec) { s.Vendors = []device.Vendor{"intel"} }, "vendors[0]", "unknown vendor"},
		{"vendor contradicts models", func(s *JobSpec) {
			s.Models, s.Vendors = []string{"h100-sxm-80g"}, []device.Vendor{device.VendorAMD}
		}, "vendors", "none of the allowed models"},
		{"memory no model has", func(s *JobSpec) { s.Models, s.MinMemoryMiB = []string{"rtx4090-*"}, 80*1024 }, "min_memory_mib", "no allowed model"},
		{"compute no model has", func(s *JobSpec) { s.MinComputeUnits = 5 }, "min_compute_units", "no allowed model"},
		{"zero price", func(s *JobSpec) { s.MaxPriceCNY = 0 }, "max_price_cny", "above 0"},
		{"negative price", func(s *JobSpec) { s.MaxPriceCNY = -1 }, "max_price_cny", "above 0"},
		{"absurd price", func(s *JobSpec) { s.MaxPriceCNY = 1e9 }, "max_price_cny", "at most"},
		{"per node does not divide", func(s *JobSpec) { s.Cards, s.Layout = 10, Layout{Mode: LayoutPerNode, PerNode: 4} }, "layout.per_node", "does not divide"},
		{"per node too big", func(s *JobSpec) { s.Cards, s.Layout = 32, Layout{Mode: LayoutPerNode, PerNode: 32} }, "layout.per_node", "most cards a node holds"},
		{"per node zero", func(s *JobSpec) { s.Layout = Layout{Mode: LayoutPerNode} }, "layout.per_node", "between 1 and 16"},
		{"per node on any", func(s *JobSpec) { s.Layout = Layout{PerNode: 2} }, "layout.per_node", "only the per_node layout"},
		{"one node too big", func(s *JobSpec) { s.Cards, s.Layout.Mode = 32, LayoutOneNode }, "layout", "no node holds more than 16"},
		{"unknown layout", func(s *JobSpec) { s.Layout.Mode = "ring" }, "layout.mode", "got \"ring\""},
		{"unknown kind", func(s *JobSpec) { s.Kind = "spot" }, "kind", "got \"spot\""},
		{"replicas on batch", func(s *JobSpec) { s.Replicas = 2 }, "replicas", "only service jobs"},
		{"service per node", func(s *JobSpec) {
			s.Kind, s.Cards, s.Layout = KindService, 8, Layout{Mode: LayoutPerNode, PerNode: 4}
		}, "layout", "each replica on one node"},
		{"service replica too big", func(s *JobSpec) { s.Kind, s.Cards = KindService, 32 }, "cards", "one node"},
		{"service too many replicas", func(s *JobSpec) { s.Kind, s.Cards, s.Replicas = KindService, 1, 257 }, "replicas", "between 1 and 256"},
		{"port on batch", func(s *JobSpec) { s.Service = &ServiceSpec{Port: 80} }, "service", "only service jobs have a port"},
		{"service port 0", func(s *JobSpec) { s.Kind, s.Cards, s.Service = KindService, 1, &ServiceSpec{} }, "service.port", "between 1 and 65535, got 0"},
		{"service port 65536", func(s *JobSpec) { s.Kind, s.Cards, s.Service = KindService, 1, &ServiceSpec{Port: 65536} }, "service.port", "got 65536"},
		{"ready path without slash", func(s *JobSpec) {
			s.Kind, s.Cards, s.Service = KindService, 1, &ServiceSpec{Port: 80, ReadyPath: "healthz"}
		}, "service.ready_path", "starting with '/'"},
		{"ready path with a host", func(s *JobSpec) {
			s.Kind, s.Cards, s.Service = KindService, 1, &ServiceSpec{Port: 80, ReadyPath: "//evil/x"}
		}, "service.ready_path", "starting with '/'"},
		{"elastic min > max", func(s *JobSpec) { s.Elastic = &Elastic{Min: 10, Max: 2} }, "elastic", "min <= max"},
		{"cards outside elastic", func(s *JobSpec) { s.Elastic = &Elastic{Min: 1, Max: 4} }, "cards", "outside the elastic range"},
		{"elastic on service", func(s *JobSpec) { s.Kind, s.Cards, s.Elastic = KindService, 1, &Elastic{Min: 1, Max: 2} }, "elastic", "replicas"},
		{"elastic one node", func(s *JobSpec) { s.Layout.Mode, s.Elastic = LayoutOneNode, &Elastic{Min: 1, Max: 8} }, "elastic", "one_node"},
		{"elastic not multiple", func(s *JobSpec) {
			s.Layout, s.Elastic = Layout{Mode: LayoutPerNode, PerNode: 4}, &Elastic{Min: 2, Max: 16}
		}, "elastic", "multiples of 4"},
		{"elastic max", func(s *JobSpec) { s.Elastic = &Elastic{Min: 1, Max: 5000} }, "elastic.max", "at most 4096"},
		{"negative duration", func(s *JobSpec) { s.ExpectedDuration = -1 }, "expected_duration", "between 0"},
		{"no command", func(s *JobSpec) { s.Command = nil }, "command", "required"},
		{"empty program", func(s *JobSpec) { s.Command = []string{""} }, "command", "required"},
		{"NUL in arg", func(s *JobSpec) { s.Command = []string{"a", "b\x00"} }, "command[1]", "NUL"},
		{"bad env name", func(s *JobSpec) { s.Env = map[string]string{"A-B": "1"} }, "env", "bad variable name"},
		{"reserved env", func(s *JobSpec) { s.Env = map[string]string{"GPUMESH_EPOCH": "1"} }, "env", "set by the executor"},
		{"bad digest", func(s *JobSpec) { s.Payload = &PayloadRef{Manifest: "md5:x", Size: 1, Holder: "h"} }, "payload.manifest", "sha256"},
		{"negative payload", func(s *JobSpec) {
			s.Payload = &PayloadRef{Manifest: "sha256:" + strings.Repeat("0", 64), Size: -1, Holder: "h"}
		}, "payload.size", "must not be negative"},
		{"payload without holder", func(s *JobSpec) {
			s.Payload = &PayloadRef{Manifest: "sha256:" + strings.Repeat("0", 64), Size: 1}
		}, "payload.holder", "peer ID"},
		{"payload path out", func(s *JobSpec) {
			s.Payload = &PayloadRef{Manifest: "sha256:" + strings.Repeat("0", 64), Size: 1, Holder: "h", Path: "../x"}
		}, "payload.path", "leaves the working directory"},
		{"s3 without bucket", func(s *JobSpec) { s.Data = dataSpec(DataInput{From: "s3:///prefix", To: "/data"}) }, "data.inputs[0].from", `"s3:///prefix" has no bucket`},
		{"not s3", func(s *JobSpec) { s.Data = dataSpec(DataInput{From: "gs://b/p", To: "/data"}) }, "data.inputs[0].from", "want s3://BUCKET/PREFIX"},
		{"bad bucket", func(s *JobSpec) { s.Data = dataSpec(DataInput{From: "s3://Bad_Bucket/p", To: "/data"}) }, "data.inputs[0].from", "not a bucket name"},
		{"input out of the dir", func(s *JobSpec) { s.Data = dataSpec(DataInput{From: "s3://bkt/p", To: "../../etc"}) }, "data.inputs[0].to", "leaves the working directory"},
		{"prefix climbs", func(s *JobSpec) {
			s.Data = dataSpec()
			s.Data.Outputs = []DataOutput{{From: "out", To: "s3://bkt/a/../b"}}
		}, "data.outputs[0].to", `".." element`},
		{"no credentials", func(s *JobSpec) {
			s.Data = dataSpec(DataInput{From: "s3://bkt/p", To: "/data"})
			s.Data.Secrets.Names = []string{"HF_TOKEN"}
		}, "data.secrets", "give the secrets AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"},
		{"no secrets", func(s *JobSpec) {
			s.Data = dataSpec(DataInput{From: "s3://bkt/p", To: "/data"})
			s.Data.Secrets = nil
		}, "data.secrets", "needs credentials"},
		{"secret also in env", func(s *JobSpec) {
			s.Data, s.Env = dataSpec(), map[string]string{SecretAccessKeyID: "x"}
		}, "data.secrets.names", "both a secret and in env"},
		{"unsorted secrets", func(s *JobSpec) {
			s.Data = dataSpec()
			s.Data.Secrets.Names = []string{"B", "A"}
		}, "data.secrets.names", "sorted"},
		{"control chars in owner", func(s *JobSpec) { s.Owner = "a\nb" }, "owner", "printable"},
		{"memory below the least", func(s *JobSpec) { s.MemoryBytes = 1 << 20 }, "memory_bytes", "8 MiB to 1 PiB, got 1 MiB"},
		{"negative memory", func(s *JobSpec) { s.MemoryBytes = -1 }, "memory_bytes", "got -1 bytes"},
		{"memory past the most", func(s *JobSpec) { s.MemoryBytes = MaxJobMemoryBytes + 1 }, "memory_bytes", "to 1 PiB"},
		{"pids below the least", func(s *JobSpec) { s.Pids = 2 }, "pids", "8 to 4194304, got 2"},
		{"negative pids", func(s *JobSpec) { s.Pids = -5 }, "pids", "got -5"},
		{"pids past the most", func(s *JobSpec) { s.Pids = MaxJobPids + 1 }, "pids", "got 4194305"},
		{"cpu weight past the most", func(s *JobSpec) { s.CPUWeight = 10001 }, "cpu_weight", "1 to 10000, got 10001"},
		{"negative cpu weight", func(s *JobSpec) { s.CPUWeight = -1 }, "cpu_weight", "got -1"},
	}
	for _, tc := range cases {
		s := validSpec()
		tc.mod(&s)
		err := s.Validate(cat)
		var se *SpecError
		if !errors.As(err, &se) || !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%s: err = %v, want a *SpecError wrapping ErrInvalidSpec", tc.name, err)
			continue
		}
		if se.Field != tc.field || !strings.Contains(se.Msg, tc.msg) {
			t.Errorf("%s: %q, want field %q and a message containing %q", tc.name, err, tc.field, tc.msg)
		}
	}
}

func TestSpecJSON(t *testing.T) {
	in := `{"id":"j7","cards":16,"models":["h100-*"],"min_memory_mib":81920,
		"layout":{"mode":"per_node","per_node":8},"max_price_cny":25,"kind":"batch",
		"expected_duration":"6h","elastic":{"min":8,"max":32},"command":["torchrun","train.py"]}`
	var s JobSpec
	if err := json.Unmarshal([]byte(in), &s); err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(nil); err != nil {
		t.Fatal(err)
	}
	if s.ExpectedDuration.Std() != 6*time.Hour || s.Layout.PerNode != 8 || s.Elastic.Max != 32 {
		t.Fatalf("decoded %+v", s)
	}
	out, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"expected_duration":"6h0m0s"`, `"min_memory_mib":81920`, `"per_node":8`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("encoded spec lacks %s: %s", want, out)
		}
	}
	var secs JobSpec
	if err := json.Unmarshal([]byte(`{"expected_duration":90}`), &secs); err != nil || secs.ExpectedDuration.Std() != 90*time.Second {
		t.Fatalf("numeric duration: %v %v", secs.ExpectedDuration, err)
	}
	if err := json.Unmarshal([]byte(`{"expected_duration":"soon"}`), &secs); err == nil || !strings.Contains(err.Error(), "soon") {
		t.Fatalf("bad duration error = %v", err)
	}
}

// Resources sit at the top level of a spec's JSON and are left out when
// zero, so a spec that declares none encodes (and signs) as before they
// existed.
func TestSpecResourcesJSON(t *testing.T) {
	var s JobSpec
	in := `{"id":"j8","cards":1,"max_price_cny":5,"command":["x"],"memory_bytes":17179869184,"pids":512,"cpu_weight":50}`
	if err := json.Unmarshal([]byte(in), &s); err != nil {
		t.Fatal(err)
	}
	if s.Resources != (Resources{MemoryBytes: 16 << 30, Pids: 512, CPUWeight: 50}) {
		t.Fatalf("decoded resources %+v", s.Resources)
	}
	out, _ := json.Marshal(s)
	for _, want := range []string{`"memory_bytes":17179869184`, `"pids":512`, `"cpu_weight":50`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("encoded spec lacks %s: %s", want, out)
		}
	}
	bare, _ := json.Marshal(validSpec())
	for _, absent := range []string{"memory_bytes", "pids", "cpu_weight", "Resources"} {
		if strings.Contains(string(bare), absent) {
			t.Errorf("a spec declaring no resources encodes %s: %s", absent, bare)
		}
	}
}

func TestNewJobID(t *testing.T) {
	id, err := NewJobID([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})
	if err != nil {
		t.Fatal(err)
	}
	if len(id) != 17 || id[0] != 'j' || ValidateJobID(id) != nil {
		t.Fatalf("NewJobID = %q", id)
	}
	again, _ := NewJobID([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	if again != id {
		t.Fatalf("NewJobID is not a function of its first 10 bytes: %q vs %q", again, id)
	}
	other, _ := NewJobID([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 11})
	if other == id {
		t.Fatal("different bytes, same id")
	}
	if _, err := NewJobID([]byte{1, 2}); !errors.Is(err, ErrInvalidJobID) {
		t.Fatalf("short input: %v", err)
	}
	for _, bad := range []string{"", "-a", "A1", "a b", "a/b", strings.Repeat("a", 65)} {
		if ValidateJobID(bad) == nil {
			t.Errorf("ValidateJobID(%q) accepted", bad)
		}
	}
}

// FuzzSpecDecode feeds arbitrary bytes to the spec decoder and Validate:
// neither may panic, and a spec that validates must survive a JSON round
// trip and validate again.
func FuzzSpecDecode(f *testing.F) {
	cat := device.DefaultCatalog()
	f.Fuzz(func(t *testing.T, data []byte) {
		var s JobSpec
		if err := json.Unmarshal(data, &s); err != nil {
			return
		}
		if err := s.Validate(cat); err != nil {
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("Validate error %v does not wrap ErrInvalidSpec", err)
			}
			return
		}
		out, err := json.Marshal(&s)
		if err != nil {
			t.Fatalf("valid spec does not encode: %v", err)
		}
		var again JobSpec
		if err := json.Unmarshal(out, &again); err != nil {
			t.Fatalf("re-decode: %v\n%s", err, out)
		}
		if err := again.Validate(cat); err != nil {
			t.Fatalf("round trip broke a valid spec: %v\n%s", err, out)
		}
	})
}

// dataSpec is a data spec with the given inputs and the object storage's
// credentials as secrets.
func dataSpec(in ...DataInput) *DataSpec {
	return &DataSpec{Inputs: in, Secrets: &SecretsRef{Names: []string{SecretAccessKeyID, SecretSecretAccessKey},
		Digest: "sha256:" + strings.Repeat("e", 64), Holder: "12D3KooWholder"}}
}

func TestParseS3URL(t *testing.T) {
	for in, want := range map[string]S3Location{
		"s3://bkt":           {Bucket: "bkt"},
		"s3://bkt/":          {Bucket: "bkt"},
		"s3://bkt/a/b":       {Bucket: "bkt", Prefix: "a/b/"},
		"s3://my.bkt-1/a/b/": {Bucket: "my.bkt-1", Prefix: "a/b/"},
	} {
		if got, err := ParseS3URL(in); err != nil || got != want {
			t.Errorf("ParseS3URL(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
}
