package wire

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestFramesRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	big := bytes.Repeat([]byte("x"), MaxFrame+10)
	w.Write(Stdin, []byte("ls\n"))
	w.Write(Resize, ResizeData(50, 160))
	w.Stream(Stdout).Write(big) // split in two frames
	w.Write(Exit, ExitData(-1, "killed"))
	r := NewReader(&buf)
	var got []Frame
	for {
		f, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, f)
	}
	if len(got) != 5 || string(got[0].Data) != "ls\n" || got[2].Type != Stdout || len(got[2].Data) != MaxFrame || len(got[3].Data) != 10 {
		t.Fatalf("frames: %d", len(got))
	}
	if rows, cols, err := ParseResize(got[1].Data); rows != 50 || cols != 160 || err != nil {
		t.Errorf("resize %d×%d, %v", rows, cols, err)
	}
	if code, sig, err := ParseExit(got[4].Data); code != -1 || sig != "killed" || err != nil {
		t.Errorf("exit %d %q %v", code, sig, err)
	}
}

func TestMalformedFramesAreRefused(t *testing.T) {
	for name, in := range map[string]string{
		"cut in a header":  "o\x00\x00",
		"cut in a payload": "o\x00\x00\x00\x05ab",
		"too long":         "o\x7f\x00\x00\x00",
	} {
		if _, err := NewReader(strings.NewReader(in)).Read(); !errors.Is(err, ErrFrame) {
			t.Errorf("%s: %v; want ErrFrame", name, err)
		}
	}
	if _, _, err := ParseResize([]byte{1}); !errors.Is(err, ErrFrame) {
		t.Errorf("a short resize: %v", err)
	}
	if _, _, err := ParseExit(nil); !errors.Is(err, ErrFrame) {
		t.Errorf("an empty exit: %v", err)
	}
}

func FuzzReader(f *testing.F) {
	f.Add([]byte("o\x00\x00\x00\x02hi"))
	f.Add([]byte("x\x00\x00\x00\x04\x00\x00\x00\x07"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := NewReader(bytes.NewReader(b))
		for {
			fr, err := r.Read()
			if err != nil {
				return
			}
			if len(fr.Data) > MaxFrame {
				t.Fatalf("a frame of %d bytes", len(fr.Data))
			}
			ParseExit(fr.Data)
			ParseResize(fr.Data)
		}
	})
}
