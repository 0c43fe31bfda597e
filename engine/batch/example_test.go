package batch_test

import (
	"fmt"

	"github.com/ringlog/ringlog/engine/batch"
)

// A producer builds a batch, the broker validates it and assigns offsets, a consumer
// decodes it.
func Example() {
	builder := batch.NewBuilder(batch.BuilderOptions{Codec: batch.CodecZstd})
	builder.Append(1_700_000_000_000, []byte("user-1"), []byte("clicked"), nil)
	builder.Append(1_700_000_000_005, nil, []byte("scrolled"),
		[]batch.RecordHeader{{Key: "trace", Value: []byte("abc")}})
	wire, err := builder.Build(nil)
	if err != nil {
		panic(err)
	}

	// Broker: check the producer's bytes, then rewrite the fields it owns.
	h, err := batch.Validate(wire)
	if err != nil {
		panic(err)
	}
	batch.SetBaseOffset(wire, 1000)
	batch.SetLeaderEpoch(wire, 3)
	fmt.Println("records", h.RecordCount, "codec", h.Compression())

	// Consumer.
	err = batch.Decode(wire, func(offset, ts int64, r *batch.Record) error {
		fmt.Printf("offset %d ts %d key %q value %q headers %d\n", offset, ts, r.Key, r.Value, len(r.Headers))
		return nil
	})
	if err != nil {
		panic(err)
	}
	// Output:
	// records 2 codec zstd
	// offset 1000 ts 1700000000000 key "user-1" value "clicked" headers 0
	// offset 1001 ts 1700000000005 key "" value "scrolled" headers 1
}
