package node

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/internal/wireschema"
	"github.com/gpumesh/gpumesh/market"
	"github.com/gpumesh/gpumesh/node/probe"
)

// testdata/wire/vN/ holds version N of the node's calls: schema.txt, the
// fields of every request and reply, and one golden request of each kind
// as version N wrote it. Every later build reads every version's requests;
// the current version keeps its schema and writes its requests byte for
// byte. After a deliberate change, raise rpcWireVersion and write the new
// version's files:
//
//	go test ./node/ -run TestRPCWireGolden -update
var updateGolden = flag.Bool("update", false, "write the golden files of the current wire version")

// rpcSamples are a request of each call kind, and the types its request
// and reply decode into.
func rpcSamples() map[string]any {
	at := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	return map[string]any{
		kindSubmit: &submitRequest{Spec: market.JobSpec{ID: "j1", Cards: 2, Models: []string{"h100-sxm-80g"}, MaxPriceCNY: 25,
			Command: []string{"python", "train.py"}, Env: map[string]string{"A": "1"},
			Payload: &market.PayloadRef{Manifest: "sha256:" + strings.Repeat("cd", 32), Size: 45 << 30, Holder: "12D3KooWholder"}}},
		kindGet:    ptr("j1"),
		kindCancel: ptr("j1"),
		kindScale:  &scaleRequest{Job: "j1", Cards: 8},
		kindLogs:   &logsRequest{Job: "j1", Share: 1, Epoch: 3, Stream: "stdout", Offset: 4096, Follow: true},
		kindClaim:  &claimRequest{Job: "j1", Term: 3},
		kindCheckpointOffer: &checkpointOffer{Job: "j1", Checkpoint: market.Checkpoint{Share: 0, Epoch: 2,
			Manifest: "sha256:" + strings.Repeat("ab", 32), Bytes: 4 << 30, NewBytes: 200 << 20, Holders: []string{"12D3KooWrunner", "12D3KooWholder"}, At: at}},
		kindCheckpointHold:  &checkpointHold{Job: "j1", Share: 0, Epoch: 2, Manifest: "sha256:" + strings.Repeat("ab", 32), Bytes: 4 << 30},
		kindCheckpointHeld:  &checkpointHeld{Manifest: "sha256:" + strings.Repeat("ab", 32)},
		kindCheckpointOwner: &checkpointQuery{Job: "j1", Share: 0},
		kindRelease:         &claimRequest{Job: "j1", Term: 3},
		kindJobsList:        &jobsListRequest{},
		kindFiles:           &filesRequest{Job: "j1", Share: 0, Epoch: 3, Path: "outputs/model.bin"},
		kindSecrets:         &secretsRequest{Job: "j1", Share: 0, Epoch: 3},
		kindPayloadHold: &payloadHold{Spec: market.JobSpec{ID: "j1", Owner: "o1owner", Cards: 1, MaxPriceCNY: 25, Command: []string{"sh", "run.sh"},
			Payload: &market.PayloadRef{Manifest: "sha256:" + strings.Repeat("cd", 32), Size: 45 << 30, Holder: "12D3KooWholder"}},
			Signature: market.SpecSignature{SignedAt: at, Sig: make([]byte, 64)}},
		kindReceipts: ptr("j1"),
		probe.KindChallenge: &probe.Challenge{Nonce: [32]byte{1, 2, 3}, Blocks: 4096,
			Work: map[string]probe.Work{"h100-sxm-80g": {Words: 16 << 20, Rounds: 1000}}},
	}
}

// rpcReplies are the reply frames' types.
func rpcReplies() map[string]any {
	return map[string]any{kindRecord: &market.JobRecord{}, kindClaimed: &claimReply{}, kindCheckpointGrant: &checkpointGrant{}, "sealed-call": &sealedCall{},
		kindReceipts: &[][]byte{}, probe.KindAnswer: &probe.Answer{}, kindFilesGrant: &filesGrant{}, kindSecretsReply: &heldSecrets{}}
}

func ptr[T any](v T) *T { return &v }

func rpcSchema() string {
	var schemas [][]string
	for kind, v := range rpcSamples() {
		schemas = append(schemas, wireschema.Of(kind, v))
	}
	for kind, v := range rpcReplies() {
		schemas = append(schemas, wireschema.Of("reply "+kind, v))
	}
	return wireschema.Text(schemas...)
}

func TestRPCWireGolden(t *testing.T) {
	cur := filepath.Join("testdata", "wire", fmt.Sprintf("v%d", rpcWireVersion))
	if *updateGolden {
		if err := os.MkdirAll(cur, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cur, "schema.txt"), []byte(rpcSchema()), 0o644); err != nil {
			t.Fatal(err)
		}
		for kind, v := range rpcSamples() {
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(cur, kind+".json"), append(b, '\n'), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	samples := rpcSamples()
	for v := 1; v <= rpcWireVersion; v++ {
		dir := filepath.Join("testdata", "wire", fmt.Sprintf("v%d", v))
		for kind, sample := range samples {
			b, err := os.ReadFile(filepath.Join(dir, kind+".json"))
			if os.IsNotExist(err) && v < rpcWireVersion {
				continue // a kind newer than that version
			}
			if err != nil {
				t.Errorf("no golden %s request of version %d: %v", kind, v, err)
				continue
			}
			got := reflect.New(reflect.TypeOf(sample).Elem()).Interface()
			if err := strictJSON(b, got); err != nil {
				t.Errorf("this build cannot read a version %d %s request: %v", v, kind, err)
				continue
			}
			if v != rpcWireVersion {
				continue
			}
			again, err := json.Marshal(got)
			if err != nil || string(again) != strings.TrimSpace(string(b)) {
				t.Errorf("the %s request's wire form changed (%v): older peers may not read it; raise rpcWireVersion and write testdata/wire/v%d (-update)", kind, err, rpcWireVersion+1)
			}
		}
	}
	want, err := os.ReadFile(filepath.Join(cur, "schema.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if got := rpcSchema(); got != string(want) {
		t.Errorf("the calls' fields changed since version %d was written:\n%s\npeers read calls strictly: raise rpcWireVersion and write testdata/wire/v%d (-update)",
			rpcWireVersion, wireschema.Diff(string(want), got), rpcWireVersion+1)
	}
}
