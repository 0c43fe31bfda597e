package client_test

import (
	"io"
	"log/slog"

	"github.com/ringlog/ringlog/engine/shard"
)

func shardOpen(dir string, shards int) (*shard.Broker, error) {
	return shard.Open(shard.Config{DataDir: dir, Shards: shards, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}
