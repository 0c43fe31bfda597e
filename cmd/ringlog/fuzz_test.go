package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine/batch"
	"github.com/ringlog/ringlog/netio/client"
)

// FuzzParseFrom: --from never panics, and whatever it accepts prints back (String) as a
// value it parses to the same position.
func FuzzParseFrom(f *testing.F) {
	for _, seed := range []string{"earliest", "latest", "0", "42", "@1700000000000", "@", "-1", "9223372036854775807", "99999999999999999999", "@-1", " 1", "beginning"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		from, err := parseFrom(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "--from ") {
				t.Fatalf("error %q does not name the flag", err)
			}
			return
		}
		again, err := parseFrom(from.String())
		if err != nil || again != from {
			t.Fatalf("%q parsed to %s, which re-parses to %s (%v)", s, from, again, err)
		}
	})
}

// FuzzParseArgs: flag parsing with interleaved positionals never panics and never loses
// or invents a positional argument.
func FuzzParseArgs(f *testing.F) {
	for _, seed := range []string{"a --partitions 3 b", "--partitions=2 -- --x", "-h", "--bogus", "a -- b c", "--partitions", ""} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Fields(line)
		fs := newFlagSet("fuzz", "fuzz")
		partitions := fs.Int("partitions", 1, "")
		var out strings.Builder
		usageOutput = &out
		defer func() { usageOutput = os.Stderr }()
		positional, err := parseArgs(fs, args)
		if err != nil {
			return
		}
		if len(positional) > len(args) {
			t.Fatalf("%q: %d positionals from %d arguments", args, len(positional), len(args))
		}
		for _, p := range positional {
			found := false
			for _, a := range args {
				found = found || a == p
			}
			if !found {
				t.Fatalf("%q: invented positional %q", args, p)
			}
		}
		_ = *partitions
	})
}

// FuzzCompileFormat: any --format either compiles or is refused naming --format, and a
// compiled one prints any record without panicking.
func FuzzCompileFormat(f *testing.F) {
	for _, seed := range []string{`%t %p %o %k %s %K %S %T %h\n`, `%%`, `%`, `\`, `\q`, `%x`, `plain`, `\0\\\t\r`, ``} {
		f.Add(seed)
	}
	record := &client.ConsumedRecord{Topic: "t", Key: []byte{0xff}, Headers: []batch.RecordHeader{{Key: "k"}}}
	f.Fuzz(func(t *testing.T, format string) {
		parts, err := compileFormat(format)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "--format ") {
				t.Fatalf("error %q does not name the flag", err)
			}
			return
		}
		w := bufio.NewWriter(io.Discard)
		writeFormatted(w, parts, record)
	})
}

// FuzzRecordFromJSON: produce --input json never panics on a line, and whatever it accepts
// prints (consume --format json) as a line it reads back to the same record.
func FuzzRecordFromJSON(f *testing.F) {
	for _, seed := range []string{
		`{"key":"a","value":"1","headers":{"x":"1","y":null},"partition":0,"timestamp":1600000000000}`,
		`{"key":"/wA=","key_encoding":"base64","value":null,"headers":[{"key":"b","value":"AAE=","value_encoding":"base64"}]}`,
		`{"value":"no key","topic":"ignored","offset":99}`,
		`{"headers":[{"key":"/w==","key_encoding":"base64","value":null}]}`,
		`{}`, `null`, `[]`, `{"value":1}`, `{"headers":{"a":1}}`, `{"value":"a"} {}`,
	} {
		f.Add([]byte(seed))
	}
	o := produceOptions{topic: "t", partition: -1}
	f.Fuzz(func(t *testing.T, line []byte) {
		rec, err := recordFromJSON(o, line)
		if err != nil {
			return
		}
		ts := rec.Timestamp
		if ts.IsZero() { // "now" at send time; a consumed record always has one
			ts = time.UnixMilli(0)
		}
		consumed := client.ConsumedRecord{Topic: "t", Partition: max(rec.Partition, 0), Key: rec.Key, Value: rec.Value, Headers: rec.Headers, Timestamp: ts}
		printed, err := json.Marshal(newJSONRecord(&consumed))
		if err != nil {
			t.Fatalf("print %+v: %v", consumed, err)
		}
		again, err := recordFromJSON(o, printed)
		if err != nil {
			t.Fatalf("%s printed as %s, which does not read back: %v", line, printed, err)
		}
		if !bytes.Equal(again.Key, rec.Key) || (again.Key == nil) != (rec.Key == nil) ||
			!bytes.Equal(again.Value, rec.Value) || (again.Value == nil) != (rec.Value == nil) ||
			len(again.Headers) != len(rec.Headers) {
			t.Fatalf("%s -> %s -> %+v, want %+v", line, printed, again, rec)
		}
		for i := range rec.Headers {
			if again.Headers[i].Key != rec.Headers[i].Key || !bytes.Equal(again.Headers[i].Value, rec.Headers[i].Value) || (again.Headers[i].Value == nil) != (rec.Headers[i].Value == nil) {
				t.Fatalf("header %d: %+v, want %+v", i, again.Headers[i], rec.Headers[i])
			}
		}
	})
}
