package shard

import (
	"errors"
	"fmt"
	"maps"
	"sort"

	"github.com/ringlog/ringlog/engine"
)

// Broker-wide partition defaults (Config.Log) can change while the broker runs (ringlogd
// reloads them on SIGHUP). They live behind an atomic pointer because request handlers
// validate topic configs against them without taking metaMu (ValidateTopic,
// ValidateAlter) and describe-configs asks BrokerSetsConfig; writers hold metaMu.

// loadLogDefaults returns the broker-wide partition defaults in force.
func (b *Broker) loadLogDefaults() engine.LogConfig { return *b.logDefaults.Load() }

// SetLogDefaults replaces the broker-wide partition defaults (what Config.Log set at Open)
// and reopens, each on its shard, the partitions of every topic whose effective
// configuration changes; topics that set a key themselves keep their value. It returns
// the names of the reconfigured topics, sorted. Invalid defaults (or defaults that make a
// topic's configuration invalid) are refused before anything changes. If reopening a
// partition fails, that topic goes back to its old configuration (as in
// AlterTopicConfig), the topics handled before it keep the new defaults, and the error
// names the topic.
func (b *Broker) SetLogDefaults(lc engine.LogConfig) ([]string, error) {
	if lc.Logger == nil {
		lc.Logger = b.cfg.Logger
	}
	if _, err := lc.Resolved(); err != nil {
		return nil, fmt.Errorf("%w: broker defaults: %w", ErrInvalidConfig, err)
	}
	b.metaMu.Lock()
	defer b.metaMu.Unlock()
	previous := b.logDefaults.Load()
	b.logDefaults.Store(&lc)
	old := b.meta.Load()
	type change struct{ old, next *Topic }
	var changes []change
	for name, t := range old.topics {
		nt, err := b.newTopic(name, t.Partitions, t.Config)
		if err != nil {
			b.logDefaults.Store(previous)
			return nil, fmt.Errorf("topic %q under the new defaults: %w", name, err)
		}
		nt.ID, nt.Incarnation = t.ID, t.Incarnation
		if !maps.Equal(b.EffectiveConfig(t), b.EffectiveConfig(nt)) {
			changes = append(changes, change{t, nt})
		}
	}
	sort.Slice(changes, func(i, j int) bool { return changes[i].next.Name < changes[j].next.Name })
	var names []string
	for _, c := range changes {
		nt := c.next
		err := b.onPartitions(nt, func(s *Shard, tp TopicPartition) error { return s.reconfigurePartition(tp, nt.logConfig, nt.minInsync) })
		if err != nil {
			// As AlterTopicConfig: put this topic's partitions back on their old config.
			t := c.old
			rerr := b.onPartitions(t, func(s *Shard, tp TopicPartition) error {
				err := s.reconfigurePartition(tp, t.logConfig, t.minInsync)
				if errors.Is(err, ErrUnknownTopicOrPartition) { // the failed reopen closed it
					err = s.openPartition(tp, t.logConfig, t.minInsync)
				}
				return err
			})
			if rerr != nil {
				b.log.Error("new defaults failed and not every partition is back on its old config; a restart restores it",
					"topic", t.Name, "err", rerr)
			}
			return names, fmt.Errorf("apply new defaults to %q: %w", nt.Name, errors.Join(err, rerr))
		}
		b.publish(b.meta.Load(), nt.Name, nt)
		names = append(names, nt.Name)
	}
	return names, nil
}

// brokerSetsConfig reports whether the broker-wide defaults set key: storage.mode when
// a storage mode is configured at all, any other key when its value differs from the
// engine's built-in default.
func (b *Broker) brokerSetsConfig(key string) bool {
	d := b.loadLogDefaults()
	if key == engine.ConfigStorageMode {
		return d.Storage != ""
	}
	if key == engine.ConfigMinInsyncReplicas {
		return false // per topic only
	}
	mine := b.EffectiveConfig(&Topic{Name: "(broker defaults)", logConfig: d, minInsync: 1})
	builtin := b.EffectiveConfig(&Topic{Name: "(engine defaults)", logConfig: engine.LogConfig{}, minInsync: 1})
	return mine[key] != builtin[key]
}
