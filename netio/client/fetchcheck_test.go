package client

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio/wire"
)

// checkerBatches builds n uncompressed batches of count records each, offsets from base.
func checkerBatches(t testing.TB, base int64, n, count int) []byte {
	t.Helper()
	var out []byte
	b := batch.NewBuilder(batch.BuilderOptions{})
	for i := range n {
		b.Reset()
		for r := range count {
			b.Append(int64(r), []byte("key"), make([]byte, 100+r), nil)
		}
		start := len(out)
		var err error
		if out, err = b.Build(out); err != nil {
			t.Fatal(err)
		}
		batch.SetBaseOffset(out[start:], base+int64(i*count))
	}
	return out
}

// referenceChecked is the simple reference for fetchChecker: the bytes of whole batches
// from the start of records whose CRC-32C matches, up to the first that does not.
func referenceChecked(records []byte) int {
	checked := 0
	for rest := records; ; {
		h, err := batch.ParseHeader(rest)
		if err != nil || h.Size() > len(rest) || batch.CheckCRC(rest[:h.Size()], h) != nil {
			return checked
		}
		checked += h.Size()
		rest = rest[h.Size():]
	}
}

// checkInPieces runs a fetchChecker over payload arriving in random pieces of at most
// pieceMax bytes (as reads bring it), then decodes payload and applies the checker's result
// (nil when payload does not decode).
func checkInPieces(rng *rand.Rand, payload []byte, pieceMax int) *wire.FetchResponse {
	var fc fetchChecker
	fc.reset(true)
	for have := 0; have < len(payload); {
		have = min(len(payload), have+1+rng.IntN(pieceMax))
		fc.advance(payload[:have])
	}
	resp := new(wire.FetchResponse)
	if resp.ReadFrom(payload) != nil {
		return nil
	}
	fc.apply(resp, payload)
	return resp
}

// feedChecker is checkInPieces for a payload that must decode.
func feedChecker(t testing.TB, rng *rand.Rand, payload []byte) *wire.FetchResponse {
	t.Helper()
	resp := checkInPieces(rng, payload, 4096)
	if resp == nil {
		t.Fatal("the test payload does not decode")
	}
	return resp
}

// TestFetchCheckerMatchesReference: over responses with several topics and partitions,
// error messages, empty and partial records, a corrupt batch and arrivals split at every
// kind of place, the checker vouches for exactly the prefix the reference finds.
func TestFetchCheckerMatchesReference(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	good := checkerBatches(t, 0, 5, 7)
	corrupt := append([]byte(nil), good...)
	corrupt[len(corrupt)/2] ^= 0x40 // inside the third batch
	partial := good[:len(good)-30]
	resp := &wire.FetchResponse{ThrottleMs: 3, Topics: []wire.FetchResponseTopic{
		{Topic: "alpha", Partitions: []wire.FetchResponsePartition{
			{Partition: 0, HighWatermark: 35, Records: good},
			{Partition: 1, ErrorCode: wire.ErrOffsetOutOfRange, ErrorMessage: "out of range"},
			{Partition: 2, Records: corrupt},
		}},
		{Topic: "", Partitions: nil},
		{Topic: "beta", Partitions: []wire.FetchResponsePartition{
			{Partition: 7, Records: partial},
			{Partition: 8, Records: []byte{1, 2, 3}},
			{Partition: 9, Records: checkerBatches(t, 100, 1, 1)},
		}},
	}}
	payload := resp.AppendTo(nil)
	for range 50 {
		got := feedChecker(t, rng, payload)
		for ti, topic := range got.Topics {
			for pi, p := range topic.Partitions {
				if want := referenceChecked(p.Records); p.RecordsCRCChecked != want {
					t.Fatalf("topic %d partition %d: checked %d bytes, reference %d (seed %d)", ti, pi, p.RecordsCRCChecked, want, seed)
				}
			}
		}
	}
	if got := feedChecker(t, rng, payload); got.Topics[0].Partitions[0].RecordsCRCChecked != len(good) {
		t.Fatalf("a good partition is not fully checked: %d of %d", got.Topics[0].Partitions[0].RecordsCRCChecked, len(good))
	}
}

// TestFetchCheckerOffForOtherFrames: a checker reset for a frame that is not a Fetch
// answer vouches for nothing.
func TestFetchCheckerOffForOtherFrames(t *testing.T) {
	resp := &wire.FetchResponse{Topics: []wire.FetchResponseTopic{{Topic: "t", Partitions: []wire.FetchResponsePartition{{Records: checkerBatches(t, 0, 2, 2)}}}}}
	payload := resp.AppendTo(nil)
	var fc fetchChecker
	fc.reset(false)
	fc.advance(payload)
	decoded := new(wire.FetchResponse)
	if err := decoded.ReadFrom(payload); err != nil {
		t.Fatal(err)
	}
	fc.apply(decoded, payload)
	if n := decoded.Topics[0].Partitions[0].RecordsCRCChecked; n != 0 {
		t.Fatalf("checked %d bytes of a frame it was not on for", n)
	}
}

// FuzzFetchChecker: on any payload, split anywhere, the checker never panics and never
// vouches for bytes whose batches do not pass their CRC. The seeds in code are small
// (shapedResponse with short records: two good batches, a partial one): the children of
// 1-2 KiB seeds took the workers' time minimizing (docs/testing.md, "Fuzz targets (session
// 15)").
func FuzzFetchChecker(f *testing.F) {
	payload := shapedResponse(f, []byte{0, 1, 0, 2, 1, 2, 1, 0, 3, 1, 2, 3, 7, 9, 1, 0, 2, 4, 5, 6, 0, 3, 0, 0, 0, 0,
		0, 2, 1, 1, 2, 5, 1, 2, 3, 4, 5, 6, 2, 0, 1, 0, 30, 2}).AppendTo(nil)
	f.Add(payload, uint64(1))
	f.Add(payload[:len(payload)-9], uint64(2))
	f.Add([]byte{}, uint64(3))
	f.Add([]byte{0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, uint64(4))
	f.Fuzz(func(t *testing.T, payload []byte, seed uint64) {
		resp := checkInPieces(rand.New(rand.NewPCG(seed, 0)), payload, 256)
		if resp == nil {
			return
		}
		for _, topic := range resp.Topics {
			for _, p := range topic.Partitions {
				if p.RecordsCRCChecked > referenceChecked(p.Records) {
					t.Fatalf("vouched for %d bytes, only %d pass their CRC", p.RecordsCRCChecked, referenceChecked(p.Records))
				}
			}
		}
	})
}

// FuzzFetchCheckerShaped: raw bytes rarely keep a batch's CRC-32C right, so this target
// builds a well-formed response from its input (shapedResponse: topics, partitions, error
// messages, batches with fuzz-chosen records, then at most one damage per partition) and
// requires the checker, on the response split anywhere, to vouch for exactly what the
// reference finds. Its seeds are 120-byte shapes: minimizing a 900-byte one's child took 20
// s of a 60 s run (docs/testing.md, "Fuzz targets (session 15)").
func FuzzFetchCheckerShaped(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 0, 1, 1, 3, 5, 1, 2, 3, 4, 5, 0, 0}, uint64(1))
	f.Fuzz(func(t *testing.T, shape []byte, seed uint64) {
		payload := shapedResponse(t, shape).AppendTo(nil)
		resp := checkInPieces(rand.New(rand.NewPCG(seed, 0)), payload, 1+int(seed%4096))
		if resp == nil {
			t.Fatalf("a shaped response does not decode: %x", payload)
		}
		for ti, topic := range resp.Topics {
			for pi, p := range topic.Partitions {
				if want := referenceChecked(p.Records); p.RecordsCRCChecked != want {
					t.Fatalf("topic %d partition %d: checked %d bytes, reference %d", ti, pi, p.RecordsCRCChecked, want)
				}
			}
		}
	})
}

// shapeReader hands out the bytes of a fuzz input, then zeros.
type shapeReader []byte

func (r *shapeReader) next() int {
	if len(*r) == 0 {
		return 0
	}
	b := (*r)[0]
	*r = (*r)[1:]
	return int(b)
}

// shapedResponse builds a Fetch response that decodes from the bytes of shape: up to 3
// topics of up to 3 partitions, each with an optional error message and up to 3 batches
// of 1-4 records whose keys and values come from shape, then at most one damage to the
// records (5 in 8 none, else a flipped bit, a cut, or bytes appended), so the checker sees
// good, corrupt and partial batches at fuzz-chosen places.
func shapedResponse(t testing.TB, shape []byte) *wire.FetchResponse {
	t.Helper()
	r := shapeReader(shape)
	b := batch.NewBuilder(batch.BuilderOptions{})
	resp := &wire.FetchResponse{ThrottleMs: int32(r.next())}
	for ti := range r.next() % 4 {
		topic := wire.FetchResponseTopic{Topic: strings.Repeat("t", ti+r.next()%3)}
		for pi := range r.next() % 4 {
			p := wire.FetchResponsePartition{Partition: int32(pi), ErrorMessage: strings.Repeat("e", r.next()%4)}
			var records []byte
			for range r.next() % 4 {
				b.Reset()
				for range 1 + r.next()%4 {
					key := make([]byte, r.next()%8)
					value := make([]byte, r.next()%64)
					for i := range value {
						value[i] = byte(r.next())
					}
					b.Append(int64(r.next()), key, value, nil)
				}
				start := len(records)
				var err error
				if records, err = b.Build(records); err != nil {
					t.Fatal(err)
				}
				batch.SetBaseOffset(records[start:], int64(r.next()))
			}
			switch at := r.next()<<8 | r.next(); r.next() % 8 {
			case 1:
				if len(records) > 0 {
					records[at%len(records)] ^= 1 << (at % 8)
				}
			case 2:
				if len(records) > 0 {
					records = records[:at%len(records)]
				}
			case 3:
				records = append(records, shape[:min(len(shape), at%64)]...)
			}
			p.Records = records
			topic.Partitions = append(topic.Partitions, p)
		}
		resp.Topics = append(resp.Topics, topic)
	}
	return resp
}

// BenchmarkFetchChecker: the reader's CRC walk over a 4 MiB answer (4 partitions of
// 16-record batches of 1 KiB values) arriving in 256 KiB reads. It allocates nothing
// once its per-partition slice has grown.
func BenchmarkFetchChecker(b *testing.B) {
	var partitions []wire.FetchResponsePartition
	for p := range int32(4) {
		var records []byte
		for len(records) < 1<<20 {
			records = append(records, benchBatch(b, int64(len(records)))...)
		}
		partitions = append(partitions, wire.FetchResponsePartition{Partition: p, Records: records})
	}
	payload := (&wire.FetchResponse{Topics: []wire.FetchResponseTopic{{Topic: "t", Partitions: partitions}}}).AppendTo(nil)
	var fc fetchChecker
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		fc.reset(true)
		for have := 0; have < len(payload); {
			have = min(len(payload), have+256<<10)
			fc.advance(payload[:have])
		}
		if len(fc.checked) != len(partitions) || fc.checked[0].checked == 0 {
			b.Fatalf("checked %+v", fc.checked)
		}
	}
}

// benchBatch is one batch of 16 records with 1 KiB values.
func benchBatch(b *testing.B, base int64) []byte {
	builder := batch.NewBuilder(batch.BuilderOptions{})
	value := make([]byte, 1024)
	for r := range 16 {
		builder.Append(int64(r), nil, value, nil)
	}
	out, err := builder.Build(nil)
	if err != nil {
		b.Fatal(err)
	}
	batch.SetBaseOffset(out, base)
	return out
}
