package client

import (
	"fmt"
	"testing"

	"github.com/ringlog/ringlog/netio/wire"
)

// produceResults finds every partition's result whatever order the response lists them
// in: in request order by its cursor, otherwise by a scan (small responses) or a map
// (large ones); a partition the response lacks is not found.
func TestProduceResultsAnyOrder(t *testing.T) {
	for _, n := range []int{1, 3, produceResultsLinearMax, produceResultsLinearMax + 1, 200} {
		var keys []topicPartition
		for i := range n {
			keys = append(keys, topicPartition{fmt.Sprint("t", i%5), int32(i)})
		}
		for _, order := range []string{"request", "reversed"} {
			resp := &wire.ProduceResponse{}
			add := func(k topicPartition) {
				if l := len(resp.Topics); l == 0 || resp.Topics[l-1].Topic != k.topic {
					resp.Topics = append(resp.Topics, wire.ProduceResponseTopic{Topic: k.topic})
				}
				tt := &resp.Topics[len(resp.Topics)-1]
				tt.Partitions = append(tt.Partitions, wire.ProduceResponsePartition{Partition: k.partition, BaseOffset: int64(k.partition) * 10})
			}
			for i := range keys {
				if order == "request" {
					add(keys[i])
				} else {
					add(keys[len(keys)-1-i])
				}
			}
			r := produceResults{resp: resp}
			for _, k := range keys {
				rp := r.find(k)
				if rp == nil || rp.Partition != k.partition || rp.BaseOffset != int64(k.partition)*10 {
					t.Fatalf("%d results in %s order: %v found %+v", n, order, k, rp)
				}
			}
			if rp := r.find(topicPartition{"t0", int32(n + 1)}); rp != nil {
				t.Fatalf("%d results in %s order: found a partition the response lacks: %+v", n, order, rp)
			}
		}
	}
}
