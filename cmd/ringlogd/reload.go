package main

// SIGHUP: re-read the configuration (the same command line, the environment, the file)
// and apply what can change while the broker runs.

import (
	"log/slog"
	"strings"

	"github.com/ringlog/ringlog/engine"
)

// reloadableKeys can change at run time. Any other key that changed is reported as
// needing a restart and keeps its running value.
var reloadableKeys = map[string]bool{
	"log-level":    true,
	keyTopicDefs:   true,
	"flush-always": true, // a partition default, as topic-defaults' flush.always
	"storage":      true, // a partition default: partitions reopen in the new mode
	// The quota keys (security.go's quotaKeys): applied by reloadQuotas.
	"quota-produce-bytes-per-sec":     true,
	"quota-fetch-bytes-per-sec":       true,
	"quota-requests-per-sec":          true,
	"quota-group-fetch-bytes-per-sec": true,
	"quota-overrides":                 true,
}

// logDefaultsSetter is the part of the broker a reload changes (shard.Broker).
type logDefaultsSetter interface {
	SetLogDefaults(engine.LogConfig) ([]string, error)
}

// reload loads the configuration again and applies the reloadable changes. It returns the
// configuration now running: on any error, running unchanged (a broken file never takes
// a running broker down).
// base holds the process-wide partition fields (disk guard, start-up verification) that
// the new defaults keep.
func reload(running *settings, args []string, getenv func(string) (string, bool), b logDefaultsSetter, base engine.LogConfig, level *slog.LevelVar, log *slog.Logger) *settings {
	next, err := loadSettings(args, getenv)
	if err != nil {
		log.Error("configuration reload failed; the running configuration stays", "err", err)
		return running
	}
	var applied, needRestart []string
	for _, key := range running.keys() {
		if running.value(key) == next.value(key) {
			continue
		}
		if reloadableKeys[key] {
			applied = append(applied, key)
		} else {
			needRestart = append(needRestart, key)
		}
	}
	if len(needRestart) > 0 {
		log.Warn("configuration changes need a restart and were not applied", "keys", strings.Join(needRestart, ","))
	}
	if len(applied) == 0 {
		log.Info("configuration reloaded: nothing to change at run time")
		return running
	}
	// The new running configuration: reloadable keys (and their sources) from next, the
	// others as they run.
	merged := &settings{o: running.o, configFile: next.configFile, sources: map[string]source{}, fs: nil}
	merged.fs = defineFlags(merged)
	for _, key := range running.keys() {
		from := running
		if reloadableKeys[key] {
			from = next
		}
		merged.sources[key] = from.sources[key]
		if key == keyTopicDefs {
			for k, v := range from.o.topicDefaults {
				merged.o.topicDefaults[k] = v
			}
			continue
		}
		if err := merged.fs.Set(key, from.value(key)); err != nil { // printed by the same flag: cannot fail
			log.Error("configuration reload failed; the running configuration stays", "err", err)
			return running
		}
	}
	var attrs []any
	if running.o.logLevel != merged.o.logLevel {
		l, _ := parseLogLevel(merged.o.logLevel)
		level.Set(l)
		attrs = append(attrs, "log_level", merged.o.logLevel)
	}
	if partitionDefaults(running) != partitionDefaults(merged) {
		newDefaults, _ := merged.logDefaultsOver(base) // validated by loadSettings
		topics, err := b.SetLogDefaults(newDefaults)
		if err != nil {
			log.Error("configuration reload: new topic defaults refused; the running ones stay", "err", err, "topics_reconfigured", strings.Join(topics, ","))
			if len(topics) == 0 {
				return running
			}
		}
		attrs = append(attrs, "topic_defaults", merged.o.topicDefaults.String(), "flush_always", merged.o.flushAlways,
			"storage", merged.o.storage, "topics_reconfigured", strings.Join(topics, ","))
	}
	log.Info("configuration reloaded", append([]any{"changed", strings.Join(applied, ",")}, attrs...)...)
	logConfig(log, merged)
	return merged
}

// partitionDefaults names the keys logDefaults is made of, with their values.
func partitionDefaults(s *settings) string {
	return s.value("storage") + " " + s.value("flush-always") + " " + s.value(keyTopicDefs)
}

// logConfig logs every key's value and source at debug level.
func logConfig(log *slog.Logger, s *settings) {
	var attrs []any
	for _, key := range s.keys() {
		attrs = append(attrs, key, s.value(key)+" ("+s.sources[key].String()+")")
	}
	log.Debug("configuration in force", attrs...)
}
