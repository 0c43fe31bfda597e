package batch

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// The varint code is checked against encoding/binary, whose Varint is the same zig-zag
// encoding (protobuf sint64), over edge values and random ones.
func TestVarintMatchesEncodingBinary(t *testing.T) {
	values := []int64{0, 1, -1, 63, -64, 64, -65, 8191, -8192, 8192, math.MaxInt32, math.MinInt32,
		math.MaxInt32 + 1, math.MinInt32 - 1, math.MaxInt64, math.MinInt64}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 10_000 {
		values = append(values, int64(rng.Uint64())>>rng.IntN(64))
	}
	for _, v := range values {
		want := binary.AppendVarint(nil, v)
		got := appendVarint(nil, v)
		if string(got) != string(want) || varintLen(v) != len(want) {
			t.Fatalf("appendVarint(%d) = %x (len %d), want %x", v, got, varintLen(v), want)
		}
		r := reader{src: append(got, 0xAA)}
		if back := r.varint64("v"); !r.ok() || back != v || len(r.src) != 1 {
			t.Fatalf("varint64 of %x = %d ok=%v rest=%d", got, back, r.ok(), len(r.src))
		}
		r = reader{src: got}
		back32 := r.varint32("v")
		fits := v >= math.MinInt32 && v <= math.MaxInt32
		if fits != r.ok() || (fits && int64(back32) != v) {
			t.Fatalf("varint32 of %d: got %d ok=%v", v, back32, r.ok())
		}
	}
}

func TestVarintRejectsMalformed(t *testing.T) {
	cases := []struct {
		name string
		src  []byte
		is64 bool
	}{
		{"empty", nil, false},
		{"unterminated", []byte{0x80}, false},
		{"six bytes for int32", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, false},
		{"above uint32 in five bytes", []byte{0xff, 0xff, 0xff, 0xff, 0x1f}, false},
		{"eleven bytes for int64", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, true},
		{"tenth byte above 1", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}, true},
	}
	for _, tc := range cases {
		r := reader{src: tc.src}
		if tc.is64 {
			r.varint64("field")
		} else {
			r.varint32("field")
		}
		if r.ok() || r.failed != "field" {
			t.Errorf("%s: accepted %x", tc.name, tc.src)
		}
	}
}
