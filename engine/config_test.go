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
		{ConfigMaxMessageBytes, "51200", ""},
		{ConfigMaxMessageBytes, "0", ""},
		{ConfigMaxMessageBytes, "-1", "max.message.bytes -1 out of range"},
		{ConfigMaxMessageBytes, "2147483648", "max.message.bytes 2147483648 out of range"},
		{ConfigMinInsyncReplicas, "0", "min.insync.replicas"},
		{ConfigMinInsyncReplicas, "-1", "min.insync.replicas"},
		{"no.such.key", "1", "unknown topic config"},
		{"retention.msec", "1", `unknown topic config "retention.msec" (did you mean "retention.ms"?)`},
		{"segment_bytes", "1048576", `(did you mean "segment.bytes"?)`},
		{ConfigCleanupPolicy, "compact", ""},
		{ConfigCleanupPolicy, "delete", ""},
		{ConfigCleanupPolicy, "compact,delete", ""},
		{ConfigCleanupPolicy, "delete, compact", ""},
		{ConfigCleanupPolicy, "compacted", "cleanup.policy"},
		{ConfigCleanupPolicy, "", "cleanup.policy"},
		{ConfigDeleteRetentionMs, "-1", "delete.retention.ms -1 is negative"},
		{ConfigDeleteRetentionMs, "1", ""},
		{ConfigMinCleanableDirtyRatio, "0", "min.cleanable.dirty.ratio"},
		{ConfigMinCleanableDirtyRatio, "1.5", "min.cleanable.dirty.ratio"},
		{ConfigMinCleanableDirtyRatio, "NaN", "min.cleanable.dirty.ratio"},
		{ConfigMinCleanableDirtyRatio, "1", ""},
		{ConfigMinCleanableDirtyRatio, "0.01", ""},
		// Values that do not parse say what was wanted, not strconv's wording.
		{ConfigRetentionMs, "abc", `topic config retention.ms="abc": want an integer`},
		{ConfigRetentionBytes, "99999999999999999999", "want an integer in range"},
		{ConfigFlushAlways, "yes please", "want true or false"},
		{ConfigMinCleanableDirtyRatio, "half", "want a number"},
		{ConfigRecycleSegments, "1.5", "want an integer"},
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

// TestCleanupPolicyParse: Kafka's spellings map to the three policies.
func TestCleanupPolicyParse(t *testing.T) {
	for in, want := range map[string]CleanupPolicy{"delete": CleanupDelete, "compact": CleanupCompact,
		"compact,delete": CleanupCompactDelete, "delete,compact": CleanupCompactDelete, " compact ": CleanupCompact} {
		c, err := LogConfigFromMap(LogConfig{}, map[string]string{ConfigCleanupPolicy: in})
		if err != nil || c.CleanupPolicy != want {
			t.Errorf("%q: %q %v", in, c.CleanupPolicy, err)
		}
	}
	c, _ := LogConfig{}.Resolved()
	if c.CleanupPolicy != CleanupDelete || c.DeleteRetentionMs != 86_400_000 || c.MinCleanableDirtyRatio != 0.5 || c.CleanupPolicy.Compacts() {
		t.Fatalf("defaults %q %d %v", c.CleanupPolicy, c.DeleteRetentionMs, c.MinCleanableDirtyRatio)
	}
}

// TestTopicConfigKeysKnown: every key TopicConfigKeys lists is one LogConfigFromMap
// understands (a bad value is refused for the value, not as an unknown key).
func TestTopicConfigKeysKnown(t *testing.T) {
	for _, k := range TopicConfigKeys() {
		if _, err := LogConfigFromMap(LogConfig{}, map[string]string{k: "\x00bad"}); err != nil && strings.Contains(err.Error(), "unknown topic config") {
			t.Errorf("%s: %v", k, err)
		}
	}
	if got := nearestTopicConfigKey("zzzz"); got != "" {
		t.Errorf("a key far from every known one got a suggestion: %q", got)
	}
}
