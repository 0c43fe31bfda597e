package wire

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"runtime"
	"testing"
)

// roundTrip encodes m, decodes into a fresh message of the same kind and checks the
// re-encoding is byte-identical and the decoded value equals the original.
func roundTrip(t *testing.T, m Message, fresh Message) {
	t.Helper()
	enc := m.AppendTo(nil)
	if err := fresh.ReadFrom(enc); err != nil {
		t.Fatalf("%s %T: decode: %v", m.API(), m, err)
	}
	if again := fresh.AppendTo(nil); !bytes.Equal(enc, again) {
		t.Fatalf("%s %T: re-encoding differs\n first %x\nsecond %x", m.API(), m, enc, again)
	}
	if !reflect.DeepEqual(normalize(m), normalize(fresh)) {
		t.Fatalf("%s %T: decoded %+v, want %+v", m.API(), m, fresh, m)
	}
	// Every strict prefix must fail cleanly (truncation), and one trailing byte too.
	for n := 0; n < len(enc); n++ {
		if err := NewSame(m).ReadFrom(enc[:n]); err == nil {
			t.Fatalf("%s %T: decoding %d of %d bytes succeeded", m.API(), m, n, len(enc))
		}
	}
	if err := NewSame(m).ReadFrom(append(enc[:len(enc):len(enc)], 0)); !errors.Is(err, ErrTrailingBytes) {
		t.Fatalf("%s %T: trailing byte: got %v", m.API(), m, err)
	}
}

// NewSame returns an empty message of m's concrete type.
func NewSame(m Message) Message {
	x := reflect.New(reflect.TypeOf(m).Elem()).Interface().(Message)
	SetWireVersion(x, WireVersionOf(m))
	return x
}

// normalize re-encodes and decodes once so that nil and empty slices compare equal where
// the wire does not distinguish them.
func normalize(m Message) Message {
	x := NewSame(m)
	if err := x.ReadFrom(m.AppendTo(nil)); err != nil {
		panic(err)
	}
	return x
}

func TestRequestRoundTrip(t *testing.T) {
	seen := map[APIKey]bool{}
	for _, m := range sampleRequests() {
		seen[m.API()] = true
		roundTrip(t, m, NewSame(m))
	}
	for _, k := range KnownAPIs() {
		if !seen[k] {
			t.Errorf("no sample request for %s", k)
		}
	}
}

func TestResponseRoundTrip(t *testing.T) {
	seen := map[APIKey]bool{}
	for _, m := range sampleResponses() {
		seen[m.API()] = true
		roundTrip(t, m, NewSame(m))
	}
	for _, k := range KnownAPIs() {
		if !seen[k] {
			t.Errorf("no sample response for %s", k)
		}
	}
}

func TestNullArraysKeepMeaning(t *testing.T) {
	var all MetadataRequest // nil Topics = every topic
	var got MetadataRequest
	if err := got.ReadFrom(all.AppendTo(nil)); err != nil || got.Topics != nil {
		t.Fatalf("null topics: got %#v, %v", got.Topics, err)
	}
	none := MetadataRequest{Topics: []string{}}
	if err := got.ReadFrom(none.AppendTo(nil)); err != nil || got.Topics == nil || len(got.Topics) != 0 {
		t.Fatalf("empty topics: got %#v, %v", got.Topics, err)
	}
}

func TestHostileCountDoesNotAllocate(t *testing.T) {
	// A produce request claiming 2^31-1 topics in a 10-byte payload.
	payload := []byte{0, 1, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 10 {
		var m ProduceRequest
		if err := m.ReadFrom(payload); !errors.Is(err, ErrBadLength) {
			t.Fatalf("got %v, want ErrBadLength", err)
		}
	}
	runtime.ReadMemStats(&after)
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 64<<10 {
		t.Fatalf("hostile count allocated %d bytes over 10 decodes", allocated)
	}
	// Negative lengths for bytes and strings.
	var p ProduceRequest
	bad := (&ProduceRequest{Topics: []ProduceTopic{{Topic: "t", Partitions: []ProducePartition{{Records: []byte("x")}}}}}).AppendTo(nil)
	copy(bad[len(bad)-5:], []byte{0xff, 0xff, 0xff, 0xfe}) // records length -2
	if err := p.ReadFrom(bad); !errors.Is(err, ErrBadLength) {
		t.Fatalf("negative bytes length: got %v", err)
	}
}

func TestFetchResponseSplicedLayout(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "seg")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	content := []byte("0123456789abcdefghij")
	if _, err := f.Write(content); err != nil {
		t.Fatal(err)
	}
	resp := &FetchResponse{Topics: []FetchResponseTopic{{Topic: "t", Partitions: []FetchResponsePartition{
		{Partition: 0, HighWatermark: 5, RecordsFile: []FileRange{{f, 2, 5}, {f, 10, 3}}},
		{Partition: 1, HighWatermark: 6, Records: []byte("mem")},
		{Partition: 2, HighWatermark: 7, Records: bytes.Repeat([]byte("z"), spliceBytesMin)},
	}}}}
	h := RequestHeader{API: APIFetch, CorrelationID: 77}
	buf, splices := AppendResponseSpliced(nil, h, resp, nil)
	if len(splices) != 3 {
		t.Fatalf("got %d splices, want 3", len(splices))
	}
	// Materialise the frame the way a sender would and decode it as a client would.
	var frame []byte
	prev := 0
	for _, s := range splices {
		frame = append(frame, buf[prev:s.At]...)
		if s.Range.File != nil {
			frame = append(frame, content[s.Range.Offset:s.Range.Offset+s.Range.Length]...)
		} else {
			frame = append(frame, s.Data...)
		}
		prev = s.At
	}
	frame = append(frame, buf[prev:]...)
	rh, payload, rest, err := SplitResponse(frame, FrameBytesMaxDefault)
	if err != nil || len(rest) != 0 {
		t.Fatalf("split: %v, %d left", err, len(rest))
	}
	if rh.CorrelationID != 77 || rh.API != APIFetch || rh.ErrorCode != ErrNone {
		t.Fatalf("header %+v", rh)
	}
	var got FetchResponse
	if err := got.ReadFrom(payload); err != nil {
		t.Fatal(err)
	}
	if r := string(got.Topics[0].Partitions[0].Records); r != "23456abc" {
		t.Fatalf("spliced records %q", r)
	}
	if r := string(got.Topics[0].Partitions[1].Records); r != "mem" {
		t.Fatalf("memory records %q", r)
	}
	if r := got.Topics[0].Partitions[2].Records; !bytes.Equal(r, bytes.Repeat([]byte("z"), spliceBytesMin)) {
		t.Fatalf("spliced memory records: %d bytes", len(r))
	}
	defer func() {
		if recover() == nil {
			t.Fatal("AppendTo with RecordsFile did not panic")
		}
	}()
	resp.AppendTo(nil)
}

func TestErrorCodes(t *testing.T) {
	err := CodeError(ErrOffsetOutOfRange, "offset 5 below 10")
	if !errors.Is(err, ErrOffsetOutOfRange) || CodeOf(err) != ErrOffsetOutOfRange {
		t.Fatalf("errors.Is/CodeOf failed for %v", err)
	}
	if CodeError(ErrNone, "x") != nil || CodeOf(nil) != ErrNone || CodeOf(errors.New("x")) != ErrUnknown {
		t.Fatal("ErrNone/nil/foreign error mapping wrong")
	}
	for code := range errorTable {
		if code.Name() == "" || code.Error() == "" {
			t.Fatalf("code %d lacks a name", code)
		}
	}
	for c := ErrorCode(0); c <= ErrTopicDeletionInProgress; c++ {
		if _, ok := errorTable[c]; !ok {
			t.Fatalf("code %d missing from the table", c)
		}
	}
	if !ErrNotLeaderOrWrongShard.Retriable() || ErrInvalidRequest.Retriable() {
		t.Fatal("retriable flags wrong")
	}
}
