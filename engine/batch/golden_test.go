package batch

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// The golden test pins the format in a file a person can read: testdata/golden.txt holds
// batch descriptions and, under each, an annotated dump of the exact bytes Builder writes.
// A change to the encoder that moves a byte fails here with a diff. After an intended
// change (there should be none: the format is frozen), regenerate with
//
//	go test -run TestGolden ./engine/batch -rewrite
//
// File syntax, one case per block, blocks separated by a line "====":
//
//	batch codec=none|zstd [base-ts=N] [producer=id,epoch,seq]
//	record ts=N [key=V] [value=V] [header=K:V]...
//	----
//	<dump>
//
// V is a word, <null>, <empty>, or repeat:C:N (N copies of byte C). An absent key or
// value is null.
var rewrite = flag.Bool("rewrite", false, "rewrite testdata/golden.txt from the encoder")

const goldenPath = "testdata/golden.txt"

func TestGolden(t *testing.T) {
	content, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	blocks := strings.Split(string(content), "\n====\n")
	for i, block := range blocks {
		input, want, found := strings.Cut(block, "----\n")
		if !found {
			t.Fatalf("block %d has no ---- separator", i)
		}
		tb := parseGoldenInput(t, input)
		b := buildOurs(t, tb)
		got := dumpBatch(t, b)
		if !*rewrite && strings.TrimRight(got, "\n") != strings.TrimRight(want, "\n") {
			t.Errorf("block %d (%s): dump differs\n--- want\n%s--- got\n%s", i, firstLine(input), want, got)
		}
		// The pinned bytes decode back to what the block describes.
		checkDecoded(t, firstLine(input), decodeAll(t, b), tb.records, 0)
		if i > 0 {
			out.WriteString("\n====\n")
		}
		out.WriteString(input + "----\n" + strings.TrimSuffix(got, "\n"))
	}
	if *rewrite {
		if err := os.WriteFile(goldenPath, []byte(out.String()+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func firstLine(s string) string { line, _, _ := strings.Cut(s, "\n"); return line }

func parseGoldenInput(t *testing.T, input string) testBatch {
	t.Helper()
	tb := testBatch{name: firstLine(input)}
	for _, line := range strings.Split(strings.TrimSpace(input), "\n") {
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		words := strings.Fields(line)
		switch words[0] {
		case "batch":
			for _, w := range words[1:] {
				k, v, _ := strings.Cut(w, "=")
				switch k {
				case "codec":
					tb.opts.Codec = map[string]Codec{"none": CodecNone, "zstd": CodecZstd}[v]
				case "base-ts":
					tb.opts.BaseTimestamp = goldenInt(t, v)
				case "producer":
					parts := strings.Split(v, ",")
					if len(parts) != 3 {
						t.Fatalf("producer=%s: want id,epoch,seq", v)
					}
					tb.opts.ProducerID = goldenInt(t, parts[0])
					tb.opts.ProducerEpoch = int16(goldenInt(t, parts[1]))
					tb.opts.BaseSequence = int32(goldenInt(t, parts[2]))
					tb.opts.Idempotent = true
				default:
					t.Fatalf("unknown batch argument %q", w)
				}
			}
		case "record":
			var r testRecord
			for _, w := range words[1:] {
				k, v, _ := strings.Cut(w, "=")
				switch k {
				case "ts":
					r.ts = goldenInt(t, v)
				case "key":
					r.key = goldenValue(t, v)
				case "value":
					r.value = goldenValue(t, v)
				case "header":
					hk, hv, _ := strings.Cut(v, ":")
					r.headers = append(r.headers, RecordHeader{Key: hk, Value: goldenValue(t, hv)})
				default:
					t.Fatalf("unknown record argument %q", w)
				}
			}
			tb.records = append(tb.records, r)
		default:
			t.Fatalf("unknown directive %q", line)
		}
	}
	if len(tb.records) == 0 {
		t.Fatalf("%s: no records", tb.name)
	}
	return tb
}

func goldenInt(t *testing.T, s string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func goldenValue(t *testing.T, s string) []byte {
	t.Helper()
	switch {
	case s == "<null>":
		return nil
	case s == "<empty>":
		return []byte{}
	case strings.HasPrefix(s, "repeat:"):
		parts := strings.Split(s, ":")
		if len(parts) != 3 || len(parts[1]) != 1 {
			t.Fatalf("bad %q: want repeat:C:N", s)
		}
		return bytes.Repeat([]byte(parts[1]), int(goldenInt(t, parts[2])))
	}
	return []byte(s)
}

// dumpBatch annotates every header field and every record of b. For zstd the compressed
// bytes depend on the compressor's version, so only their size is pinned and the records
// are dumped decompressed.
func dumpBatch(t *testing.T, b []byte) string {
	t.Helper()
	h, err := Validate(b)
	if err != nil {
		t.Fatal(err)
	}
	var s strings.Builder
	compressed := h.Compression() != CodecNone
	field := func(name string, at, size int, value any) {
		fmt.Fprintf(&s, "%2d %-16s %-16s %v\n", at, name, hex.EncodeToString(b[at:at+size]), value)
	}
	// Fields that follow from the compressed size are not pinned for compressed batches.
	compressorField := func(name string, at int) {
		fmt.Fprintf(&s, "%2d %-16s %-16s %v\n", at, name, "........", "depends on the compressor")
	}
	field("baseOffset", offsetBaseOffset, 8, h.BaseOffset)
	if compressed {
		compressorField("batchLength", offsetLength)
	} else {
		field("batchLength", offsetLength, 4, h.Length)
	}
	field("leaderEpoch", offsetLeaderEpoch, 4, h.LeaderEpoch)
	field("magic", offsetMagic, 1, h.Magic)
	if compressed {
		compressorField("crc", offsetCRC)
	} else {
		field("crc", offsetCRC, 4, "crc32c(bytes 21..end)")
	}
	field("attributes", offsetAttributes, 2, "codec="+h.Compression().String())
	field("lastOffsetDelta", offsetLastOffsetDelta, 4, h.LastOffsetDelta)
	field("baseTimestamp", offsetBaseTimestamp, 8, h.BaseTimestamp)
	field("maxTimestamp", offsetMaxTimestamp, 8, h.MaxTimestamp)
	field("producerId", offsetProducerID, 8, h.ProducerID)
	field("producerEpoch", offsetProducerEpoch, 2, h.ProducerEpoch)
	field("baseSequence", offsetBaseSequence, 4, h.BaseSequence)
	field("recordCount", offsetRecordCount, 4, h.RecordCount)
	records := b[HeaderSize:]
	if h.Compression() == CodecZstd {
		fmt.Fprintf(&s, "61 records         zstd frame; decompressed:\n")
		if records, err = decompressZstd(nil, records); err != nil {
			t.Fatal(err)
		}
	} else {
		fmt.Fprintf(&s, "61 records         %d bytes:\n", len(records))
	}
	for i := 0; len(records) > 0; i++ {
		length, n := binary.Varint(records)
		if n <= 0 || n+int(length) > len(records) {
			t.Fatalf("record %d: bad length", i)
		}
		record := records[:n+int(length)]
		fmt.Fprintf(&s, "   record %d, %d+%d bytes:\n", i, n, length)
		for len(record) > 0 {
			line := record[:min(len(record), 32)]
			fmt.Fprintf(&s, "     %s\n", hex.EncodeToString(line))
			record = record[len(line):]
		}
		records = records[n+int(length):]
	}
	return s.String()
}
