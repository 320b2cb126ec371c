package mesh

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	ma "github.com/multiformats/go-multiaddr"
)

// goldenMeta is the metadata the golden files hold.
func goldenMeta() Meta {
	return Meta{
		Addrs:  []ma.Multiaddr{ma.StringCast("/ip4/203.0.113.7/tcp/4747"), ma.StringCast("/ip4/192.168.1.20/udp/4747/quic-v1")},
		Region: "cn-east", Cards: 8, FreeCards: 6, Models: []string{"h100-sxm-80g"}, Coordinator: true,
	}
}

// testdata/wire/v0/meta.bin is the metadata of the nodes of before
// MetaVersion (no version field); vN/meta.bin version N's. Every later
// build reads them all, and the current version writes its file byte for
// byte. After a deliberate change, raise MetaVersion and add
// testdata/wire/v<N>/meta.bin (this test prints the bytes to write).
func TestMetaWireGolden(t *testing.T) {
	for v := 0; v <= MetaVersion; v++ {
		path := filepath.Join("testdata", "wire", fmt.Sprintf("v%d", v), "meta.bin")
		b, err := os.ReadFile(path)
		if err != nil {
			cur, _ := encodeMeta(goldenMeta())
			t.Fatalf("%v (the current encoding is % x)", err, cur)
		}
		m, err := decodeMeta(b)
		if err != nil {
			t.Errorf("this build cannot read metadata of version %d: %v", v, err)
			continue
		}
		want := goldenMeta()
		want.Version = uint32(v)
		if !reflect.DeepEqual(m, want) {
			t.Errorf("version %d metadata reads as %+v, want %+v", v, m, want)
		}
		if v == MetaVersion {
			if cur, err := encodeMeta(goldenMeta()); err != nil || !bytes.Equal(cur, b) {
				t.Errorf("the metadata's wire form changed (%v): raise MetaVersion and add testdata/wire/v%d/meta.bin", err, MetaVersion+1)
			}
		}
	}
}
