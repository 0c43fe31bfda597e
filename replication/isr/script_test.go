package isr_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/ringlog/ringlog/replication/isr"
)

// The scripted tests in testdata/scripts/*.txt drive one partition replicated on a few simulated
// brokers (harness_test.go) and print every message between leader, followers and the
// controller, in order. Regenerate the expected output with
//
//	go test ./replication/isr -run TestScripts -rewrite
//
// Commands:
//
//	init replicas=N min-insync=N lag=DURATION   n1 leads at epoch 0, every replica in the ISR
//	produce acks=all|1 values=a,b,...           the leader appends one batch
//	fetch n=ID [max=N] [drop-response] [epoch=E]
//	                                            one follower round (epoch question and
//	                                            truncation first when needed), max records;
//	                                            the response may be lost, the follower's
//	                                            leader epoch replaced
//	tick DURATION                               advance the clock and tick the leader
//	deliver-isr [drop]                          the controller receives the oldest AlterISR
//	crash n=ID                                  the broker dies (its log survives)
//	elect [unclean]                             the controller elects a new leader
//	restart n=ID                                the broker returns as a follower
//	consume                                     a consumer reads up to the high watermark
//	state                                       every replica's log, offsets and epochs
//	check                                       the safety invariants (acked records kept,
//	                                            replicas identical below the high watermark)
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/scripts", func(t *testing.T, path string) {
		var c *cluster
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			var out strings.Builder
			if d.Cmd != "init" && c == nil {
				d.Fatalf(t, "init first")
			}
			switch d.Cmd {
			case "init":
				c = newCluster(intArg(t, d, "replicas", 3), intArg(t, d, "min-insync", 2), durationArg(t, d, "lag", 10*time.Second))
				c.state(&out)
			case "produce":
				acks := isr.AcksAll
				if s := stringArg(d, "acks", "all"); s != "all" {
					n, err := strconv.Atoi(s)
					if err != nil {
						d.Fatalf(t, "acks=%s", s)
					}
					acks = int16(n)
				}
				values := strings.Split(stringArg(d, "values", "x"), ",")
				if err := c.produce(acks, values, &out); err != nil {
					d.Fatalf(t, "%v", err)
				}
			case "fetch":
				var epoch *int32
				if s := stringArg(d, "epoch", ""); s != "" {
					e := int32(intArg(t, d, "epoch", 0))
					epoch = &e
				}
				if err := c.fetch(isr.ReplicaID(intArg(t, d, "n", 0)), intArg(t, d, "max", 1000), d.HasArg("drop-response"), epoch, &out); err != nil {
					d.Fatalf(t, "%v", err)
				}
			case "tick":
				if len(d.CmdArgs) != 1 {
					d.Fatalf(t, "tick DURATION")
				}
				dur, err := time.ParseDuration(d.CmdArgs[0].Key)
				if err != nil {
					d.Fatalf(t, "%v", err)
				}
				c.tick(dur, &out)
			case "deliver-isr":
				c.deliverISR(d.HasArg("drop"), &out)
			case "crash":
				c.crash(isr.ReplicaID(intArg(t, d, "n", 0)), &out)
			case "elect":
				c.elect(d.HasArg("unclean"), &out)
			case "restart":
				c.restart(isr.ReplicaID(intArg(t, d, "n", 0)), &out)
			case "consume":
				c.consume(&out)
			case "state":
				c.state(&out)
			case "check":
				if err := c.checkInvariants(); err != nil {
					fmt.Fprintf(&out, "violated: %v\n", err)
				} else {
					out.WriteString("ok\n")
				}
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			if out.Len() == 0 {
				return "(no output)\n"
			}
			return out.String()
		})
	})
}

func stringArg(d *datadriven.TestData, key, def string) string {
	for _, a := range d.CmdArgs {
		if a.Key == key && len(a.Vals) > 0 {
			return strings.Join(a.Vals, ",")
		}
	}
	return def
}

func intArg(t *testing.T, d *datadriven.TestData, key string, def int) int {
	s := stringArg(d, key, "")
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		d.Fatalf(t, "%s=%s: %v", key, s, err)
	}
	return n
}

func durationArg(t *testing.T, d *datadriven.TestData, key string, def time.Duration) time.Duration {
	s := stringArg(d, key, "")
	if s == "" {
		return def
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		d.Fatalf(t, "%s=%s: %v", key, s, err)
	}
	return v
}
