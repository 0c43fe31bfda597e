package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

func TestParseBrokerIDs(t *testing.T) {
	for in, want := range map[string][]int32{"1,2,3": {1, 2, 3}, "3": {3}, " 2, 1": {2, 1}} {
		got, err := parseBrokerIDs(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("parseBrokerIDs(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for in, want := range map[string]string{"": "missing", "1,1": "twice", "1,x": "not a broker id", "-1": "not a broker id",
		"1,,2": "not a broker id", strings.Repeat("1,", 16) + "1": "at most 16"} {
		if _, err := parseBrokerIDs(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseBrokerIDs(%q): %v, want an error containing %q", in, err, want)
		}
	}
}

// On a broker that runs alone, the cluster and partition commands say that they need a
// replicated cluster (they printed only NOT_CONTROLLER's "...; retry").
func TestClusterCommandsOnASingleBroker(t *testing.T) {
	addr := startBroker(t)
	for _, args := range [][]string{
		{"cluster", "describe", "--broker", addr},
		{"partition", "elect-leader", "orders", "--broker", addr},
	} {
		var stderr bytes.Buffer
		code := runCLI(args, &stderr)
		if code != 1 || !strings.Contains(stderr.String(), "NOT_CONTROLLER") || !strings.Contains(stderr.String(), "this command needs a replicated cluster") {
			t.Errorf("%q: exit %d: %s", args, code, stderr.String())
		}
	}
}
