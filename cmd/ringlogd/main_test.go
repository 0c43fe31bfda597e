package main

import (
	"testing"
)

func TestParseFlagsAdvertise(t *testing.T) {
	o, err := parseFlags([]string{"--listen", "0.0.0.0:9400", "--advertise", "broker1"})
	if err != nil || o.advertise != "broker1" {
		t.Fatalf("parseFlags: %+v %v", o, err)
	}
}
