package admin_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/ringlog/ringlog/netio/admin"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
)

// BenchmarkScrape1000Partitions: one whole /metrics scrape of a broker holding 1,000
// partitions on 2 shards (the shards copy their counters and partition states on their
// loops; the collector formats about 8,000 partition series).
func BenchmarkScrape1000Partitions(b *testing.B) {
	cfg := admin.Config{}
	br := brokertest.Start(b, brokertest.Options{Admin: &cfg})
	if err := br.Core.CreateTopic("wide", 1000, nil); err != nil {
		b.Fatal(err)
	}
	url := "http://" + br.Node.Admin.Addr() + "/metrics"
	b.ReportAllocs()
	var size int64
	for b.Loop() {
		resp, err := http.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		size, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("scrape: %v %d", err, resp.StatusCode)
		}
	}
	b.SetBytes(size)
}

// BenchmarkStats1000Partitions: the shard side of that scrape alone (Broker.Stats).
func BenchmarkStats1000Partitions(b *testing.B) {
	br := brokertest.Start(b, brokertest.Options{})
	if err := br.Core.CreateTopic("wide", 1000, nil); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := br.Core.Stats(); err != nil {
			b.Fatal(err)
		}
	}
}
