package workload

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// FuzzParseJobs checks that any input either parses into jobs that keep
// the trace's limits, sorted by arrival, or fails with a *ParseError (or
// an error naming the file), never a panic.
func FuzzParseJobs(f *testing.F) {
	f.Add([]byte("submit_s,gpus,duration_s,gpu_model,status\n0,1,2323172,unknown,unknown\n364815,8,4842984,unknown,unknown\n"))
	f.Add([]byte("gpus,duration_s,submit_s\n4,1.5,0\n"))
	f.Add([]byte("submit_s,gpus,duration_s\n0,0,1\n"))
	f.Add([]byte("# c\nsubmit_s,gpus,duration_s\n\"1\",\"2\n\",3\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := ParseJobs(bytes.NewReader(data), "f.csv")
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) && !strings.HasPrefix(err.Error(), "f.csv") {
				t.Fatalf("error without a place: %v", err)
			}
			return
		}
		for i, j := range tr.Jobs {
			if j.GPUs < 1 || j.GPUs > MaxGPUs || j.Duration <= 0 || j.Submit < 0 || j.Line < 2 {
				t.Fatalf("job out of range: %+v", j)
			}
			if i > 0 && j.Submit < tr.Jobs[i-1].Submit {
				t.Fatal("not sorted")
			}
		}
	})
}

// FuzzParseAvailability is FuzzParseJobs for availability traces: sessions
// are non-empty and a node's sessions never overlap.
func FuzzParseAvailability(f *testing.F) {
	f.Add([]byte("node,up_s,down_s\nhome-7,0,1800\nhome-7,2400,\n"))
	f.Add([]byte("node,up_s,down_s\na,0,\na,1,2\n"))
	f.Add([]byte("down_s,node,up_s\n5,x,1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		av, err := ParseAvailability(bytes.NewReader(data), "f.csv")
		if err != nil {
			return
		}
		for i, s := range av.Sessions {
			if s.Down <= s.Up || s.Node == "" {
				t.Fatalf("bad session %+v", s)
			}
			if i > 0 && av.Sessions[i-1].Node == s.Node && s.Up < av.Sessions[i-1].Down {
				t.Fatalf("overlap: %+v, %+v", av.Sessions[i-1], s)
			}
		}
	})
}
