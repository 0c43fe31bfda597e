package batch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// These tests prove byte-for-byte compatibility with Kafka RecordBatch v2 by building the
// same batches with franz-go's kmsg (a Kafka client's own wire structs) and comparing,
// in both directions: our encoder produces kmsg's bytes, kmsg reads our bytes back to the
// same fields and records, and Decode reads kmsg's bytes back to the same records.

type testRecord struct {
	ts      int64
	key     []byte
	value   []byte
	headers []RecordHeader
}

type testBatch struct {
	name    string
	opts    BuilderOptions
	records []testRecord
}

// kmsgReference encodes tb with kmsg the way a Kafka producer lays a batch out: base
// offset 0, leader epoch -1, offset deltas 0..n-1, base timestamp = the option or the
// first record's. zstd uses an encoder with the same settings as ours, created here.
func kmsgReference(t testing.TB, tb testBatch, producerID int64, producerEpoch int16, baseSequence int32) []byte {
	t.Helper()
	base := tb.opts.BaseTimestamp
	if base == 0 {
		base = tb.records[0].ts
	}
	maxTs := int64(math.MinInt64)
	var section []byte
	for i, r := range tb.records {
		maxTs = max(maxTs, r.ts)
		kr := kmsg.Record{TimestampDelta64: r.ts - base, OffsetDelta: int32(i), Key: r.key, Value: r.value}
		for _, h := range r.headers {
			kr.Headers = append(kr.Headers, kmsg.Header{Key: h.Key, Value: h.Value})
		}
		body := kr.AppendTo(nil) // with Length 0: a one-byte length prefix
		kr.Length = int32(len(body) - 1)
		section = kr.AppendTo(section)
	}
	if tb.opts.Codec == CodecZstd {
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1),
			zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithZeroFrames(true))
		if err != nil {
			t.Fatal(err)
		}
		section = enc.EncodeAll(section, nil)
	}
	kb := kmsg.RecordBatch{
		FirstOffset:          0,
		Length:               int32(49 + len(section)),
		PartitionLeaderEpoch: -1,
		Magic:                2,
		Attributes:           int16(tb.opts.Codec),
		LastOffsetDelta:      int32(len(tb.records) - 1),
		FirstTimestamp:       base,
		MaxTimestamp:         maxTs,
		ProducerID:           producerID,
		ProducerEpoch:        producerEpoch,
		FirstSequence:        baseSequence,
		NumRecords:           int32(len(tb.records)),
		Records:              section,
	}
	out := kb.AppendTo(nil)
	kb.CRC = int32(crc32.Checksum(out[21:], crc32.MakeTable(crc32.Castagnoli)))
	return kb.AppendTo(nil)
}

func buildOurs(t testing.TB, tb testBatch) []byte {
	t.Helper()
	b := NewBuilder(tb.opts)
	for _, r := range tb.records {
		b.Append(r.ts, r.key, r.value, r.headers)
	}
	out, err := b.Build(nil)
	if err != nil {
		t.Fatalf("%s: Build: %v", tb.name, err)
	}
	return out
}

func randomBytes(rng *rand.Rand, n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(rng.IntN(256))
	}
	return p
}

// randomNullable returns nil a quarter of the time, empty an eighth, else random bytes of
// a length up to maxLen (lengths above 63 need two-byte varints, above 8191 three).
func randomNullable(rng *rand.Rand, maxLen int) []byte {
	switch rng.IntN(8) {
	case 0, 1:
		return nil
	case 2:
		return []byte{}
	}
	return randomBytes(rng, rng.IntN(maxLen+1))
}

func randomBatch(rng *rand.Rand, name string, codec Codec) testBatch {
	tb := testBatch{name: name, opts: BuilderOptions{Codec: codec}}
	if rng.IntN(3) == 0 {
		tb.opts.ProducerID = rng.Int64N(1 << 40)
		tb.opts.ProducerEpoch = int16(rng.IntN(1000))
		tb.opts.BaseSequence = rng.Int32N(1 << 30)
		tb.opts.Idempotent = true
	}
	if rng.IntN(4) == 0 {
		tb.opts.BaseTimestamp = 1_700_000_000_000 + rng.Int64N(1000)
	}
	valueMax := 200
	if rng.IntN(4) == 0 {
		valueMax = 20_000
	}
	ts := 1_700_000_000_000 + rng.Int64N(1<<20)
	for range 1 + rng.IntN(40) {
		r := testRecord{
			ts:    ts + rng.Int64N(20_000) - 10_000, // negative deltas too
			key:   randomNullable(rng, 100),
			value: randomNullable(rng, valueMax),
		}
		for range rng.IntN(4) {
			key := string(randomBytes(rng, rng.IntN(20)))
			r.headers = append(r.headers, RecordHeader{Key: key, Value: randomNullable(rng, 80)})
		}
		tb.records = append(tb.records, r)
	}
	return tb
}

func fixedBatches() []testBatch {
	big := bytes.Repeat([]byte("ringlog "), 100_000/8)
	return []testBatch{
		{name: "null key and value", records: []testRecord{{ts: 1000}}},
		{name: "empty key and value", records: []testRecord{{ts: 1000, key: []byte{}, value: []byte{}}}},
		{name: "headers with null and empty values", records: []testRecord{{
			ts: 5, key: []byte("k"), value: []byte("v"),
			headers: []RecordHeader{{Key: "a", Value: nil}, {Key: "", Value: []byte{}}, {Key: "trace", Value: []byte("x")}},
		}}},
		{name: "negative and zero timestamps", records: []testRecord{{ts: 0}, {ts: -5}, {ts: 1 << 40}}},
		{name: "explicit base timestamp", opts: BuilderOptions{BaseTimestamp: 999},
			records: []testRecord{{ts: 1000, value: []byte("a")}, {ts: 990, value: []byte("b")}}},
		{name: "idempotent producer zero ids", opts: BuilderOptions{Idempotent: true},
			records: []testRecord{{ts: 1, value: []byte("a")}}},
		{name: "idempotent producer", opts: BuilderOptions{ProducerID: 1 << 33, ProducerEpoch: 7, BaseSequence: 1 << 30},
			records: []testRecord{{ts: 1, value: []byte("a")}, {ts: 2, value: []byte("b")}}},
		{name: "100 KiB value, three-byte varints", records: []testRecord{{ts: 1, key: []byte("big"), value: big}}},
		{name: "zstd single record", opts: BuilderOptions{Codec: CodecZstd},
			records: []testRecord{{ts: 1, key: []byte("k"), value: []byte("hello hello hello hello")}}},
		{name: "zstd with headers and nulls", opts: BuilderOptions{Codec: CodecZstd},
			records: []testRecord{
				{ts: 10, value: big, headers: []RecordHeader{{Key: "h", Value: nil}}},
				{ts: 11, key: []byte{}, value: nil},
			}},
	}
}

func allBatches() []testBatch {
	rng := rand.New(rand.NewPCG(1, 2))
	batches := fixedBatches()
	for i := range 150 {
		codec := CodecNone
		if i%3 == 0 {
			codec = CodecZstd
		}
		batches = append(batches, randomBatch(rng, fmt.Sprintf("random-%d-%s", i, codec), codec))
	}
	return batches
}

// producerFields is what the builder must write for these options.
func producerFields(o BuilderOptions) (int64, int16, int32) {
	if !o.Idempotent && o.ProducerID == 0 && o.ProducerEpoch == 0 && o.BaseSequence == 0 {
		return -1, -1, -1
	}
	return o.ProducerID, o.ProducerEpoch, o.BaseSequence
}

func TestBuildMatchesKmsgBytes(t *testing.T) {
	for _, tb := range allBatches() {
		pid, epoch, seq := producerFields(tb.opts)
		want := kmsgReference(t, tb, pid, epoch, seq)
		got := buildOurs(t, tb)
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: our batch differs from kmsg's\nours: %x\nkmsg: %x", tb.name, head(got), head(want))
		}
	}
}

func head(b []byte) []byte { return b[:min(len(b), 128)] }

// kmsgRecords decodes a batch with kmsg alone (plus a zstd decoder of its own).
func kmsgRecords(t *testing.T, b []byte) (kmsg.RecordBatch, []kmsg.Record) {
	t.Helper()
	var kb kmsg.RecordBatch
	if err := kb.ReadFrom(b); err != nil {
		t.Fatalf("kmsg RecordBatch.ReadFrom: %v", err)
	}
	section := kb.Records
	if kb.Attributes&7 == 4 {
		dec, err := zstd.NewReader(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer dec.Close()
		if section, err = dec.DecodeAll(section, nil); err != nil {
			t.Fatalf("zstd: %v", err)
		}
	}
	var out []kmsg.Record
	for len(section) > 0 {
		length, n := binary.Varint(section)
		if n <= 0 || int(length)+n > len(section) {
			t.Fatalf("record %d: bad length prefix", len(out))
		}
		var kr kmsg.Record
		if err := kr.ReadFrom(section[:n+int(length)]); err != nil {
			t.Fatalf("kmsg Record.ReadFrom: %v", err)
		}
		out = append(out, kr)
		section = section[n+int(length):]
	}
	return kb, out
}

func TestKmsgDecodesOurBatches(t *testing.T) {
	for _, tb := range allBatches() {
		ours := buildOurs(t, tb)
		SetBaseOffset(ours, 1<<35)
		SetLeaderEpoch(ours, 42)
		kb, krs := kmsgRecords(t, ours)
		pid, epoch, seq := producerFields(tb.opts)
		if kb.FirstOffset != 1<<35 || kb.PartitionLeaderEpoch != 42 || kb.Magic != 2 ||
			int(kb.Length)+12 != len(ours) || kb.NumRecords != int32(len(tb.records)) ||
			kb.LastOffsetDelta != int32(len(tb.records)-1) || kb.ProducerID != pid ||
			kb.ProducerEpoch != epoch || kb.FirstSequence != seq || Codec(kb.Attributes&7) != tb.opts.Codec {
			t.Fatalf("%s: kmsg reads header %+v", tb.name, kb)
		}
		if uint32(kb.CRC) != crc32.Checksum(ours[21:], crc32.MakeTable(crc32.Castagnoli)) {
			t.Fatalf("%s: crc field does not match bytes", tb.name)
		}
		if len(krs) != len(tb.records) {
			t.Fatalf("%s: kmsg found %d records, want %d", tb.name, len(krs), len(tb.records))
		}
		for i, kr := range krs {
			want := tb.records[i]
			if kb.FirstTimestamp+kr.TimestampDelta64 != want.ts || kr.OffsetDelta != int32(i) ||
				!sameNullable(kr.Key, want.key) || !sameNullable(kr.Value, want.value) ||
				len(kr.Headers) != len(want.headers) {
				t.Fatalf("%s: record %d: kmsg reads %+v, want %+v", tb.name, i, kr, want)
			}
			for j, h := range kr.Headers {
				if h.Key != want.headers[j].Key || !sameNullable(h.Value, want.headers[j].Value) {
					t.Fatalf("%s: record %d header %d: %+v, want %+v", tb.name, i, j, h, want.headers[j])
				}
			}
		}
	}
}

func TestDecodeReadsKmsgBatches(t *testing.T) {
	for _, tb := range allBatches() {
		pid, epoch, seq := producerFields(tb.opts)
		ref := kmsgReference(t, tb, pid, epoch, seq)
		SetBaseOffset(ref, 3_000_000_000) // beyond 2^31
		got := decodeAll(t, ref)
		checkDecoded(t, tb.name, got, tb.records, 3_000_000_000)
	}
}

// decoded is a deep copy of what Decode handed to its callback.
type decoded struct {
	offset, ts int64
	key, value []byte
	headers    []RecordHeader
}

func clone(p []byte) []byte {
	if p == nil {
		return nil
	}
	return append([]byte{}, p...)
}

func decodeAll(t *testing.T, b []byte) []decoded {
	t.Helper()
	var out []decoded
	err := Decode(b, func(offset, ts int64, r *Record) error {
		d := decoded{offset: offset, ts: ts, key: clone(r.Key), value: clone(r.Value)}
		for _, h := range r.Headers {
			d.headers = append(d.headers, RecordHeader{Key: h.Key, Value: clone(h.Value)})
		}
		out = append(out, d)
		return nil
	})
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	return out
}

func checkDecoded(t *testing.T, name string, got []decoded, want []testRecord, baseOffset int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: decoded %d records, want %d", name, len(got), len(want))
	}
	for i, g := range got {
		w := want[i]
		if g.offset != baseOffset+int64(i) || g.ts != w.ts || !sameNullable(g.key, w.key) ||
			!sameNullable(g.value, w.value) || len(g.headers) != len(w.headers) {
			t.Fatalf("%s: record %d: got offset %d ts %d key %q value len %d headers %d, want ts %d key %q value len %d headers %d",
				name, i, g.offset, g.ts, g.key, len(g.value), len(g.headers), w.ts, w.key, len(w.value), len(w.headers))
		}
		for j := range g.headers {
			if g.headers[j].Key != w.headers[j].Key || !sameNullable(g.headers[j].Value, w.headers[j].Value) {
				t.Fatalf("%s: record %d header %d: got %+v want %+v", name, i, j, g.headers[j], w.headers[j])
			}
		}
	}
}

// sameNullable compares byte slices keeping null (nil) distinct from empty.
func sameNullable(a, b []byte) bool {
	return (a == nil) == (b == nil) && bytes.Equal(a, b)
}

// TestDecodeKmsgAttributes covers header features our Builder never writes but Kafka
// clients and brokers do: log-append-time, transactional and control bits.
func TestDecodeKmsgAttributes(t *testing.T) {
	tb := testBatch{name: "log append time", records: []testRecord{{ts: 10, value: []byte("a")}, {ts: 20, value: []byte("b")}}}
	ref := kmsgReference(t, tb, 9, 1, 0)
	var kb kmsg.RecordBatch
	if err := kb.ReadFrom(ref); err != nil {
		t.Fatal(err)
	}
	kb.Attributes |= 0x08 | 0x10 // log append time, transactional
	kb.MaxTimestamp = 777
	out := kb.AppendTo(nil)
	kb.CRC = int32(crc32.Checksum(out[21:], crc32.MakeTable(crc32.Castagnoli)))
	out = kb.AppendTo(nil)

	h, err := Validate(out)
	if err != nil {
		t.Fatal(err)
	}
	if !h.LogAppendTime() || !h.Transactional() || h.Control() || h.ProducerID != 9 {
		t.Fatalf("header flags: %+v", h)
	}
	for _, d := range decodeAll(t, out) {
		if d.ts != 777 {
			t.Fatalf("log-append-time record has ts %d, want maxTimestamp 777", d.ts)
		}
	}
}
