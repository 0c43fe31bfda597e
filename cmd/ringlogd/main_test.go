package main

import (
	"testing"
)

func TestParseFlagsAdvertise(t *testing.T) {
	s, err := loadSettings([]string{"--listen", "0.0.0.0:9400", "--advertise", "broker1"}, noEnv)
	if err != nil || s.o.advertise != "broker1" {
		t.Fatalf("loadSettings: %v", err)
	}
}

func noEnv(string) (string, bool) { return "", false }
