//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumesh/gpumesh/market"
)

// natStepScript counts steps in its checkpoint, resuming from the
// restored one, and says on its log where each attempt started.
const natStepScript = `d=$GPUMESH_CHECKPOINT_DIR
s=$(cat $d/step 2>/dev/null || echo 0)
echo "epoch $GPUMESH_EPOCH starts at step $s"
while [ $s -lt $STEPS ]; do s=$((s+1)); echo $s > $d/step; echo "step $s"; sleep 0.2; done`

func natJob(steps int, models ...string) market.JobSpec {
	return market.JobSpec{AllowSimulated: true, Cards: 1, Models: models, MaxPriceCNY: 50,
		Command: []string{"sh", "-c", natStepScript}, Env: map[string]string{"STEPS": strconv.Itoa(steps)}}
}

// connView is how node from sees node to: "direct", "relayed" or "" (no
// connection).
func connView(from, to *proc) string {
	return from.peers()[to.peerID].Conn
}

// Two suppliers, each behind a masquerading NAT of its own, and one public
// node: both join through the public node, learn each other through the
// mesh, and connect to each other through the public node's relay and
// then directly by hole punching. A job placed on each has its logs read
// through the other supplier; a third job's checkpoint, shipped from the
// supplier that ran it, is restored on the other after its node is
// killed. The test logs how each pair ended connected: direct or relayed.
func TestNATTraversal(t *testing.T) {
	lab := newNATLab(t)
	start := time.Now()
	pubNS, pubAddr := lab.public()
	s1NS, s1Addr := lab.behindNAT(1)
	s2NS, s2Addr := lab.behindNAT(2)

	pub := lab.node(t, "pub", pubNS, pubAddr, "--reachability", "public")
	joinQUIC := fmt.Sprintf("/ip4/%s/udp/%d/quic-v1/p2p/%s", pubAddr, labPort, pub.peerID)
	s1 := lab.node(t, "s1", s1NS, s1Addr, "--sim", "rtx4090-24g:2", "--join", pub.joinAddr(), "--join", joinQUIC)
	s2 := lab.node(t, "s2", s2NS, s2Addr, "--sim", "rtx5090-32g:2", "--join", pub.joinAddr(), "--join", joinQUIC)
	nodes := []*proc{pub, s1, s2}
	waitAllSee(t, nodes, 3, 4)
	t.Logf("%.1f s: the three nodes see each other alive", time.Since(start).Seconds())

	// The suppliers cannot dial each other's LAN addresses, nor each
	// other's routers unasked: they reach each other through the public
	// node's relay, and hole punching makes that direct.
	for _, to := range []string{s2Addr, lab.wanAddr(22)} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if c, err := nsDialer(s1NS)(ctx, "tcp", fmt.Sprintf("%s:%d", to, labPort)); err == nil {
			c.Close()
			t.Fatalf("s1 dialled %s:%d directly: the lab's NAT lets connections in", to, labPort)
		}
		cancel()
	}
	sawRelayed := false
	eventually(t, 40*time.Second, "s1 and s2 connected directly (hole punching)", func() bool {
		a, b := connView(s1, s2), connView(s2, s1)
		sawRelayed = sawRelayed || a == "relayed" || b == "relayed"
		return a == "direct" && b == "direct"
	})
	t.Logf("%.1f s: s1 and s2 connected directly (relayed first: %v)", time.Since(start).Seconds(), sawRelayed)
	// A job on each supplier; each one's logs are read through the other.
	a := pub.submit(natJob(1000, "rtx4090-24g"))
	b := pub.submit(natJob(1000, "rtx5090-32g"))
	for _, j := range []struct {
		id          string
		runner, via *proc
	}{{a.ID, s1, s2}, {b.ID, s2, s1}} {
		rec := j.via.waitJob(j.id, 20*time.Second, market.JobRunning)
		if n := rec.Placements[0].Node; n != j.runner.peerID {
			t.Fatalf("job %s runs on %s, want %s", j.id, short(n), j.runner.name)
		}
		eventually(t, 15*time.Second, fmt.Sprintf("%s's log read through %s", j.runner.name, j.via.name), func() bool {
			logs, err := j.via.text("/v1/jobs/" + j.id + "/logs")
			return err == nil && strings.HasPrefix(logs, "epoch 1 starts at step 0\n") && strings.Contains(logs, "step 3\n")
		})
	}

	// A third job runs on whichever supplier has a card left; once its
	// checkpoint has left that supplier, the supplier's node dies, and
	// the job runs on the other one from the checkpoint.
	c := pub.submit(natJob(1000))
	rec := pub.waitJob(c.ID, 20*time.Second, market.JobRunning)
	first, other := s1, s2
	if rec.Placements[0].Node == s2.peerID {
		first, other = s2, s1
	}
	eventually(t, 20*time.Second, "job "+c.ID+"'s checkpoint is kept off its runner", func() bool {
		resp, err := pub.do(http.MethodGet, "/v1/jobs/"+c.ID+"/checkpoint")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	// Connections as they are before a node goes.
	report := natReport(nodes)
	first.kill()
	t.Logf("%.1f s: killed %s, which ran %s", time.Since(start).Seconds(), first.name, c.ID)
	var resumed string
	eventually(t, 30*time.Second, c.ID+" runs on "+other.name+" from its checkpoint", func() bool {
		r, err := pub.job(c.ID)
		if err != nil || r.State != market.JobRunning {
			return false
		}
		live := r.Live()
		if len(live) != 1 || live[0].Node != other.peerID {
			return false
		}
		logs, err := pub.text("/v1/jobs/" + c.ID + "/logs")
		m := regexp.MustCompile(`epoch \d+ starts at step (\d+)\n`).FindStringSubmatch(logs)
		if err != nil || m == nil {
			return false
		}
		resumed = m[1]
		return true
	})
	if resumed == "0" {
		t.Errorf("%s started over on %s: its checkpoint was not restored", c.ID, other.name)
	}
	t.Logf("%.1f s: %s resumed on %s at step %s", time.Since(start).Seconds(), c.ID, other.name, resumed)
	t.Log(report)

	// gpumesh doctor on the killed supplier's machine, its port free
	// again, asking the public node: it sees the NAT, and that the port
	// cannot be dialled from outside.
	firstNS := map[*proc]string{s1: s1NS, s2: s2NS}[first]
	out := runCLIIn(t, firstNS, "doctor", "--data", t.TempDir(), "--listen", fmt.Sprintf("/ip4/%s/tcp/%d", first.ip, labPort),
		"--listen", fmt.Sprintf("/ip4/%s/udp/%d/quic-v1", first.ip, labPort), "--join", pub.joinAddr(), "--join", joinQUIC)
	t.Logf("gpumesh doctor behind %s's NAT:\n%s", first.name, out)
	router := lab.wanAddr(20 + map[*proc]int{s1: 1, s2: 2}[first])
	if want := "NAT type           behind NAT (seen as /ip4/" + router + "/"; !strings.Contains(out, want) {
		t.Errorf("doctor behind NAT does not say %q", want)
	}
	if strings.Contains(out, "OK    mesh reachability") {
		t.Error("doctor behind NAT says peers can dial the machine")
	}
}

// natReport counts the connections between the lab's nodes, each pair
// once as each side sees it: direct or relayed.
func natReport(nodes []*proc) string {
	direct, relayed, none := 0, 0, 0
	var lines []string
	for i, a := range nodes {
		for _, b := range nodes[i+1:] {
			ab, ba := connView(a, b), connView(b, a)
			kind := ab
			if ab != ba {
				kind = ab + "/" + ba
			}
			switch {
			case ab == "direct" && ba == "direct":
				direct++
			case ab == "relayed" || ba == "relayed":
				relayed++
			default:
				none++
			}
			lines = append(lines, fmt.Sprintf("%s–%s %s", a.name, b.name, orNone(kind)))
		}
	}
	return fmt.Sprintf("connections: %d direct, %d relayed, %d none (%s)", direct, relayed, none, strings.Join(lines, ", "))
}

func orNone(s string) string {
	if s == "" || s == "/" {
		return "none"
	}
	return s
}
