package main

import (
	"os"
	"strings"
	"testing"
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
