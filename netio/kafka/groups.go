package kafka

import (
	"time"

	"github.com/ringlog/ringlog/engine/group"
	"github.com/ringlog/ringlog/engine/shard"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The group APIs (api_find_coordinator.go … api_describe_groups.go) translate Kafka's group
// requests into engine/group's and hand them to the broker's group router (shard.Groups.Do),
// the entry point the ringlog protocol's group APIs use: one coordinator per group, on the
// shard that owns the group's __consumer_offsets partition, with the same members,
// generations and committed offsets whichever protocol a client speaks. The coordinator's
// codes are Kafka's numbers, so they go on the wire as they are. Answers come back on a
// shard loop (a JoinGroup's when its join phase ends) and are only encoded there.
//
// Byte fields of a decoded request alias its pooled frame, which is reused once the request
// is answered; what the coordinator keeps (protocol metadata, assignments) is copied.

// groupDo runs req on its coordinator and replies with answer's response.
func (s *Server) groupDo(p *pending, req group.Request, answer func(group.Response) kmsg.Response) {
	s.b.Groups().Do(shard.CallerNone, req, func(r group.Response) { p.reply(answer(r), nil) })
}

func millis(ms int32) time.Duration { return time.Duration(ms) * time.Millisecond }

// uniqueNames is names without repeats, in the order of their first appearance.
func uniqueNames(names []string) []string {
	if len(names) < 2 {
		return names
	}
	seen := make(map[string]struct{}, len(names))
	out := make([]string, 0, len(names))
	for _, n := range names {
		if _, dup := seen[n]; !dup {
			seen[n] = struct{}{}
			out = append(out, n)
		}
	}
	return out
}

// repeatedNames is the set of names that appear more than once in names (nil when none).
func repeatedNames(names []string) map[string]bool {
	if len(names) < 2 {
		return nil
	}
	seen := make(map[string]bool, len(names))
	var repeated map[string]bool
	for _, n := range names {
		if seen[n] {
			if repeated == nil {
				repeated = map[string]bool{}
			}
			repeated[n] = true
		}
		seen[n] = true
	}
	return repeated
}

// duplicateTopicMessage is what Kafka's KRaft controller (ControllerApis) answers, with
// INVALID_REQUEST and once per name, for a topic that CreateTopics, DeleteTopics or
// CreatePartitions names more than once; none of its copies is acted on.
const duplicateTopicMessage = "Duplicate topic name."

// nullable is s as a nullable string: nil when empty.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// deref is a nullable string's value ("" for null).
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// groupMessage is a response's error message for code: nil on success.
func groupMessage(code group.Code) *string {
	if code == group.CodeNone {
		return nil
	}
	return str(code.String())
}
