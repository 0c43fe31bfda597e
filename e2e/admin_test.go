package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/netio/client"
	"golang.org/x/sys/unix"
)

// Numbers of TestCreateTopicAtFdLimit.
const (
	fdLimitPartitions = 600 // partitions of the topic whose create runs out of descriptors
	fdLimitHeadroom   = 300 // descriptors above those open before the create (1 per idle partition: its .log)
)

// TestCreateTopicAtFdLimit: a real ringlogd whose descriptor limit (lowered with prlimit)
// runs out part-way through creating a 600-partition topic. The create fails and leaves
// nothing (no topic in metadata or the catalog, no partition directory); once the limit is
// raised the create succeeds, and a restart serves the topic.
func TestCreateTopicAtFdLimit(t *testing.T) {
	b := startBroker(t)
	ctx := testContext(t, 60*time.Second)
	c := b.client(t)
	pid := b.cmd.Process.Pid
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	var old unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, nil, &old); err != nil {
		t.Fatal(err)
	}
	low := unix.Rlimit{Cur: uint64(len(fds) + fdLimitHeadroom), Max: old.Max}
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &low, nil); err != nil {
		t.Skipf("cannot lower the broker's descriptor limit: %v", err)
	}
	err = c.CreateTopic(ctx, "big", fdLimitPartitions, nil)
	if err == nil {
		t.Fatalf("create of %d partitions under a limit of %d descriptors succeeded", fdLimitPartitions, low.Cur)
	}
	t.Logf("create under the limit: %v", err)
	topics, lerr := c.ListTopics(ctx)
	if lerr != nil {
		t.Fatal(lerr)
	}
	for _, ti := range topics {
		if ti.Name == "big" {
			t.Fatalf("failed create left the topic in metadata: %+v", ti)
		}
	}
	assertNoTopicOnDisk(t, b.dataDir, "big")

	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &old, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateTopic(ctx, "big", fdLimitPartitions, nil); err != nil {
		t.Fatalf("retried create: %v", err)
	}
	c.Close()
	b.stop()
	b.restart()
	c = b.client(t)
	topics, err = c.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	topics = slices.DeleteFunc(topics, func(ti client.TopicInfo) bool { return ti.Name == "__consumer_offsets" }) // every broker has it
	if len(topics) != 1 || topics[0].Name != "big" || topics[0].Partitions != fdLimitPartitions {
		t.Fatalf("after restart: topics %+v", topics)
	}
}

// assertNoTopicOnDisk fails if the data dir holds a partition directory or catalog entry of
// topic.
func assertNoTopicOnDisk(t *testing.T, dataDir, topic string) {
	t.Helper()
	entries, err := os.ReadDir(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), topic+"-") {
			t.Fatalf("%s left in the data dir", filepath.Join(dataDir, e.Name()))
		}
	}
	cat, err := engine.LoadCatalog(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cat.Topic(topic); ok {
		t.Fatalf("catalog still holds %q", topic)
	}
}
