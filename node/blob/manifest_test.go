package blob

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// sampleManifest is a small valid manifest of every entry type.
func sampleManifest() *Manifest {
	a, b := Sum([]byte("a")), Sum([]byte("b"))
	return &Manifest{Version: 1, Entries: []Entry{
		{Path: "d", Type: TypeDir, Mode: 0o755},
		{Path: "d/e", Type: TypeDir},
		{Path: "d/e/empty", Type: TypeFile, Mode: 0o600},
		{Path: "d/f", Type: TypeFile, Mode: 0o644, Size: 3, Chunks: []ChunkRef{{a, 1}, {b, 1}, {a, 1}}},
		{Path: "link", Type: TypeSymlink, Target: "../elsewhere & <there>"},
	}}
}

func TestManifestRoundTrip(t *testing.T) {
	m := sampleManifest()
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"target":"../elsewhere & <there>"`) {
		t.Errorf("encoding escapes HTML characters: %s", b)
	}
	back, err := DecodeManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	again, err := back.Encode()
	if err != nil || string(again) != string(b) {
		t.Fatalf("re-encoded:\n%s\nwant\n%s (%v)", again, b, err)
	}
	if got := back.Size(); got != 3 {
		t.Errorf("Size = %d, want 3", got)
	}
	if got := back.Chunks(); len(got) != 2 || got[0].Digest != Sum([]byte("a")) {
		t.Errorf("Chunks = %v, want a then b once each", got)
	}
	d, _ := m.Digest()
	if d != Sum(b) {
		t.Errorf("Digest %s is not the digest of the encoding %s", d, Sum(b))
	}
}

func TestDecodeManifestRejects(t *testing.T) {
	chunk := func(s string, n int64) string { return fmt.Sprintf(`{"digest":"%s","size":%d}`, Sum([]byte(s)), n) }
	wrap := func(entries ...string) string {
		return `{"version":1,"entries":[` + strings.Join(entries, ",") + `]}`
	}
	dir := func(p string) string { return fmt.Sprintf(`{"path":%q,"type":"dir","mode":493}`, p) }
	file := func(p string) string { return fmt.Sprintf(`{"path":%q,"type":"file","mode":420}`, p) }
	for _, tc := range []struct {
		name, in, why string
	}{
		{"not JSON", `{"version":1,`, "not a manifest"},
		{"not an object", `[]`, "not a manifest"},
		{"unknown field", `{"version":1,"entries":[],"x":1}`, "unknown field"},
		{"trailing data", `{"version":1,"entries":[]} {}`, "trailing data"},
		{"white space", `{"version":1, "entries":[]}`, "not in canonical form: byte 13"},
		{"field order", `{"entries":[],"version":1}`, "not in canonical form: byte 2"},
		{"field case", `{"Version":1,"entries":[]}`, "not in canonical form"},
		{"duplicate field", `{"version":1,"version":1,"entries":[]}`, "not in canonical form"},
		{"escaped", `{"version":1,"entries":[{"path":"\u0061","type":"dir"}]}`, "not in canonical form"},
		{"version", `{"version":2,"entries":[]}`, "version 2, this gpumesh reads 1"},
		{"no entries", `{"version":1}`, "no entries list"},
		{"null entries", `{"version":1,"entries":null}`, "no entries list"},
		{"absolute", wrap(file("/etc/passwd")), "is absolute"},
		{"dotdot", wrap(dir("a"), file("a/../../x")), `has a ".." element`},
		{"dotdot alone", wrap(file("..")), `has a ".." element`},
		{"dot", wrap(file("./x")), `has a "." element`},
		{"empty path", wrap(file("")), "is empty"},
		{"double slash", wrap(dir("a"), file("a//b")), "empty element"},
		{"trailing slash", wrap(dir("a/")), "empty element"},
		{"backslash", wrap(file(`a\b`)), "backslash"},
		{"control", wrap(file("a\nb")), "control character"},
		{"nul", wrap(`{"path":"a\u0000b","type":"file"}`), "control character"},
		{"long element", wrap(file(strings.Repeat("x", 256))), "element of 256 bytes"},
		{"long path", wrap(file(strings.Repeat("x/", 2048) + "x")), "over 4096"},
		{"unsorted", wrap(file("b"), file("a")), `comes after "b"`},
		{"duplicate", wrap(file("a"), file("a")), `comes after "a"`},
		{"no parent", wrap(file("a/b")), `parent "a" is not a directory`},
		{"parent is a file", wrap(file("a"), file("a/b")), `parent "a" is not a directory`},
		{"parent is a link", wrap(`{"path":"a","type":"symlink","target":"/etc"}`, file("a/passwd")), `parent "a" is not a directory`},
		{"type", wrap(`{"path":"a","type":"fifo"}`), `type "fifo"`},
		{"setuid", wrap(`{"path":"a","type":"file","mode":2541}`), "mode 04755 has bits outside 0777"},
		{"sticky dir", wrap(`{"path":"a","type":"dir","mode":1023}`), "mode 01777 has bits outside 0777"},
		{"link mode", wrap(`{"path":"a","type":"symlink","mode":511,"target":"b"}`), "a symlink has no mode"},
		{"link no target", wrap(`{"path":"a","type":"symlink"}`), "target is empty"},
		{"link nul", wrap(`{"path":"a","type":"symlink","target":"b\u0000"}`), "NUL"},
		{"dir target", wrap(`{"path":"a","type":"dir","target":"b"}`), "a dir has no target"},
		{"dir size", wrap(`{"path":"a","type":"dir","size":1}`), "a dir has no size"},
		{"link chunks", wrap(`{"path":"a","type":"symlink","target":"b","chunks":[` + chunk("a", 1) + `]}`), "a symlink has no size and no chunks"},
		{"negative size", wrap(`{"path":"a","type":"file","size":-1}`), "size -1"},
		{"empty chunks list", wrap(`{"path":"a","type":"file","chunks":[]}`), "an empty file has no chunks list"},
		{"sum", wrap(`{"path":"a","type":"file","size":3,"chunks":[` + chunk("a", 1) + `]}`), "chunks add up to 1 bytes, size is 3"},
		{"empty chunk", wrap(`{"path":"a","type":"file","size":1,"chunks":[` + chunk("a", 0) + `]}`), "chunk 0 is 0 bytes"},
		{"huge chunk", wrap(fmt.Sprintf(`{"path":"a","type":"file","size":%d,"chunks":[%s]}`, MaxChunkSize+1, chunk("a", MaxChunkSize+1))), "chunk 0 is 8388609 bytes"},
		{"two sizes", wrap(`{"path":"a","type":"file","size":3,"chunks":[` + chunk("a", 1) + `,` + chunk("a", 2) + `]}`), "is 2 bytes here and 1 bytes elsewhere"},
		{"bad digest", wrap(`{"path":"a","type":"file","size":1,"chunks":[{"digest":"md5:00","size":1}]}`), "not a manifest"},
		{"zero digest", wrap(`{"path":"a","type":"file","size":1,"chunks":[{"digest":"sha256:` + strings.Repeat("0", 64) + `","size":1}]}`), "zero digest"},
		{"invalid utf8", wrap(`{"path":"a` + "\xff" + `b","type":"file"}`), "not in canonical form"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeManifest([]byte(tc.in))
			var me *ManifestError
			if !errors.Is(err, ErrBadManifest) || !errors.As(err, &me) || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("DecodeManifest(%s) = %v, want a *ManifestError saying %q", clip(tc.in), err, tc.why)
			}
		})
	}
}

func TestDecodeManifestNamesTheEntry(t *testing.T) {
	in := `{"version":1,"entries":[{"path":"a","type":"dir"},{"path":"a/b","type":"file","mode":4095}]}`
	_, err := DecodeManifest([]byte(in))
	var me *ManifestError
	if !errors.As(err, &me) || me.Entry != 1 || me.Path != "a/b" {
		t.Fatalf("err = %v, want entry 1 a/b named", err)
	}
}

func TestEncodeRefusesInvalid(t *testing.T) {
	m := sampleManifest()
	m.Entries[0], m.Entries[1] = m.Entries[1], m.Entries[0]
	if _, err := m.Encode(); !errors.Is(err, ErrBadManifest) {
		t.Fatalf("Encode of unsorted entries = %v", err)
	}
}
