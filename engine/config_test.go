package engine

import (
	"strconv"
	"strings"
	"testing"
)

// TestLogConfigRanges: every topic config value outside its range is refused with a
// message naming the key, and the edges of each range are accepted.
func TestLogConfigRanges(t *testing.T) {
	cases := []struct {
		key, value string
		wantErr    string // "" accepted
	}{
		{ConfigFlushMessages, "-1", "flush.messages -1 is negative"},
		{ConfigFlushMessages, "0", ""},
		{ConfigFlushMessages, "1", ""},
		{ConfigFlushMs, "-5", "flush.ms -5 is negative"},
		{ConfigFlushMs, "0", ""},
		{ConfigRetentionMs, "-2", "retention.ms -2"},
		{ConfigRetentionMs, "-1", ""},
		{ConfigRetentionMs, "1", ""},
		{ConfigRetentionBytes, "-7", "retention.bytes -7"},
		{ConfigRetentionBytes, "-1", ""},
		{ConfigRetentionBytes, "1", ""},
		{ConfigSegmentMs, "1", "segment.ms 1: want 0 (no time-based roll) or at least"},
		{ConfigSegmentMs, strconv.Itoa(SegmentMsMin - 1), "at least " + strconv.Itoa(SegmentMsMin)},
		{ConfigSegmentMs, strconv.Itoa(SegmentMsMin), ""},
		{ConfigSegmentMs, "0", ""},
		{ConfigSegmentMs, "-1", "segment.ms -1"},
		{ConfigSegmentBytes, "1023", "segment.bytes 1023 out of range"},
		{ConfigMinInsyncReplicas, "0", "min.insync.replicas"},
		{ConfigMinInsyncReplicas, "-1", "min.insync.replicas"},
		{"no.such.key", "1", "unknown topic config"},
	}
	for _, tc := range cases {
		t.Run(tc.key+"="+tc.value, func(t *testing.T) {
			_, err := LogConfigFromMap(LogConfig{}, map[string]string{tc.key: tc.value})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
