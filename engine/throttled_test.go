package engine

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseThrottledReplicas(t *testing.T) {
	for _, c := range []struct {
		in   string
		want ThrottledReplicas
		err  bool
	}{
		{in: "*", want: ThrottledReplicas{All: true}},
		{in: " * ", want: ThrottledReplicas{All: true}},
		{in: "", want: ThrottledReplicas{}},
		{in: "0:1", want: ThrottledReplicas{Replicas: []ThrottledReplica{{0, 1}}}},
		{in: "0:1, 2:3", want: ThrottledReplicas{Replicas: []ThrottledReplica{{0, 1}, {2, 3}}}},
		{in: "0", err: true},
		{in: "0:1,", err: true},
		{in: "-1:1", err: true},
		{in: "0:x", err: true},
		{in: "*,0:1", err: true},
		{in: "0:99999999999", err: true},
	} {
		got, err := ParseThrottledReplicas(c.in)
		if (err != nil) != c.err || fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("ParseThrottledReplicas(%q) = %v, %v; want %v, error %v", c.in, got, err, c.want, c.err)
		}
	}
	l, _ := ParseThrottledReplicas("0:1,2:3")
	if !l.Contains(0, 1) || !l.Contains(2, 3) || l.Contains(0, 3) || l.Contains(1, 1) {
		t.Errorf("Contains of %v wrong", l)
	}
	if _, err := LogConfigFromMap(LogConfig{}, map[string]string{ConfigLeaderThrottledReplicas: "0:1", ConfigFollowerThrottledReplicas: "*"}); err != nil {
		t.Errorf("LogConfigFromMap refused the throttled-replicas keys: %v", err)
	}
	if _, err := LogConfigFromMap(LogConfig{}, map[string]string{ConfigFollowerThrottledReplicas: "0-1"}); err == nil {
		t.Error("LogConfigFromMap accepted a malformed throttled-replicas list")
	}
}

// FuzzParseThrottledReplicas: any input parses or is refused without panicking, and what
// parses prints back to a value that parses to the same list.
func FuzzParseThrottledReplicas(f *testing.F) {
	for _, s := range []string{"*", "", "0:1,2:3", " 4 : 5 ", "1:2:3", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		l, err := ParseThrottledReplicas(in)
		if err != nil {
			return
		}
		var parts []string
		for _, r := range l.Replicas {
			parts = append(parts, fmt.Sprintf("%d:%d", r.Partition, r.Broker))
		}
		out := strings.Join(parts, ",")
		if l.All {
			out = "*"
		}
		again, err := ParseThrottledReplicas(out)
		if err != nil || fmt.Sprint(again) != fmt.Sprint(l) {
			t.Fatalf("%q parsed to %v, printed %q, parsed again to %v, %v", in, l, out, again, err)
		}
	})
}
