package client_test

import (
	"context"
	"testing"

	"github.com/ringlog/ringlog/netio/client"
	"github.com/ringlog/ringlog/netio/internal/brokertest"
	"github.com/ringlog/ringlog/netio/node"
	"github.com/ringlog/ringlog/netio/wire"
)

// downgradedBroker starts a broker, connects a client to it (the handshake records the
// versions it serves), and restarts it on the same address and data directory as an older
// release that serves at most the given versions (netio.Config.APIVersionsMax): a broker
// rolled back, or a cluster mid-upgrade, under a running client. It returns the client
// and the restarted broker.
func downgradedBroker(t *testing.T, versionsMax map[wire.APIKey]uint16) (*client.Client, *brokertest.Broker) {
	t.Helper()
	dir := t.TempDir()
	first := brokertest.Start(t, brokertest.Options{Dir: dir, NoClient: true})
	c, err := client.New(context.Background(), client.Config{Broker: first.Addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	first.Stop()
	older := brokertest.Start(t, brokertest.Options{Dir: dir, NoClient: true, Node: func(cfg *node.Config) {
		cfg.Listen = first.Addr
		cfg.Server.APIVersionsMax = versionsMax
	}})
	return c, older
}

// TestAdminAgainstOlderBroker: the client sends CreateTopics, DeleteTopics and AlterConfigs
// at version 1 (timeout_ms 0 there means "no time left", not "the broker's default"), at
// version 0 to a broker whose handshake listed only that, and again at version 0 when a
// broker it handshook at version 1 answers UNSUPPORTED_VERSION (an older release now at that
// address).
func TestAdminAgainstOlderBroker(t *testing.T) {
	admin := map[wire.APIKey]uint16{wire.APICreateTopics: 0, wire.APIDeleteTopics: 0, wire.APIAlterConfigs: 0}
	run := func(t *testing.T, c *client.Client, b *brokertest.Broker) {
		ctx := ctxT(t)
		if err := c.CreateTopic(ctx, "orders", 2, nil); err != nil {
			t.Fatal(err)
		}
		if err := c.AlterConfigs(ctx, "orders", map[string]string{"retention.ms": "1234567"}, nil); err != nil {
			t.Fatal(err)
		}
		if got := b.Core.Topic("orders").Config["retention.ms"]; got != "1234567" {
			t.Fatalf("retention.ms=%q after AlterConfigs", got)
		}
		if err := c.DeleteTopic(ctx, "orders"); err != nil {
			t.Fatal(err)
		}
		if b.Core.Topic("orders") != nil {
			t.Fatal("DeleteTopic left the topic")
		}
	}
	t.Run("older at the handshake", func(t *testing.T) {
		b := brokertest.Start(t, brokertest.Options{Node: func(cfg *node.Config) { cfg.Server.APIVersionsMax = admin }})
		run(t, b.Client, b)
	})
	t.Run("older after the handshake", func(t *testing.T) {
		c, b := downgradedBroker(t, admin)
		run(t, c, b)
	})
}

// TestMetadataAgainstOlderBroker: a broker the client handshook at Metadata version 1,
// restarted as a release that serves only version 0, answers UNSUPPORTED_VERSION; the client
// asks again at version 0 (it gave up with UNSUPPORTED_VERSION before).
func TestMetadataAgainstOlderBroker(t *testing.T) {
	c, b := downgradedBroker(t, map[wire.APIKey]uint16{wire.APIMetadata: 0})
	if err := b.Core.CreateTopic("orders", 3, nil); err != nil {
		t.Fatal(err)
	}
	n, err := c.Partitions(ctxT(t), "orders")
	if err != nil || n != 3 {
		t.Fatalf("partitions of orders from a Metadata v0 broker: %d, %v", n, err)
	}
}
