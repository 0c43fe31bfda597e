package bench

import (
	"strings"
	"testing"
)

func TestCheckTargets(t *testing.T) {
	maxRate := func(mbps float64) *Result {
		r := sampleResult("x", mbps, 100)
		r.Workload = Workload{MaxInFlight: 1024, Durability: "none"}
		return r
	}
	ours, peer := maxRate(700), maxRate(140)
	ours.TestSeconds = 600
	ours.BrokerRSS = RSSStats{FirstBytes: 100 << 20, LastBytes: 101 << 20, GrowthBytes: 1 << 20}
	verdicts := CheckTargets(ours, peer)
	if len(verdicts) != 2 || !verdicts[0].Met || !strings.Contains(verdicts[0].Target, "5×") || !verdicts[1].Met {
		t.Fatalf("max rate verdicts %+v", verdicts)
	}
	ours.Publish.MBPerSec = 600 // 4.3×
	ours.BrokerRSS.GrowthBytes, ours.BrokerRSS.LastBytes = 50<<20, 150<<20
	verdicts = CheckTargets(ours, peer)
	if verdicts[0].Met || verdicts[1].Met {
		t.Fatalf("missed targets reported met: %+v", verdicts)
	}
	ours.TestSeconds = 20
	if v := CheckTargets(ours, peer); !v[1].NotJudged || v[1].Met {
		t.Fatalf("RSS judged on a 20 s run: %+v", v[1])
	}

	fsync, fsyncPeer := maxRate(300), maxRate(10)
	fsync.Workload.Durability = "fsync"
	if v := CheckTargets(fsync, fsyncPeer); len(v) != 1 || !v[0].Met || !strings.Contains(v[0].Target, "30×") {
		t.Fatalf("fsync verdicts %+v", v)
	}

	sync, syncPeer := maxRate(1), maxRate(1)
	sync.Workload.MaxInFlight = 1
	sync.PublishLatency.P99Us, syncPeer.PublishLatency.P99Us = 500, 2400
	if v := CheckTargets(sync, syncPeer); len(v) != 1 || !v[0].Met || !strings.Contains(v[0].Target, "p99") {
		t.Fatalf("sync verdicts %+v", v)
	}

	catchUp, catchUpPeer := maxRate(20), maxRate(20)
	catchUp.Workload.BacklogSize, catchUp.Workload.ProducerRate = 1<<30, 1000
	catchUp.Backlog, catchUp.LoopbackMBps = &Backlog{BacklogReadMBPerSec: 600}, 1000
	catchUpPeer.Backlog, catchUpPeer.Consume.MBPerSec = &Backlog{}, 25 // peer never finished
	v := CheckTargets(catchUp, catchUpPeer)
	if len(v) != 2 || !v[0].Met || !v[1].Met || !strings.Contains(v[1].Measured, "60%") || !strings.Contains(v[0].Measured, "never finished") {
		t.Fatalf("catch-up verdicts %+v", v)
	}

	var out strings.Builder
	if err := WriteTargets(&out, []Verdict{{Target: "x", Measured: "1×"}}); err != nil || !strings.Contains(out.String(), "MISSED") {
		t.Fatalf("output %q err %v", out.String(), err)
	}
}
