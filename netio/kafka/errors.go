package kafka

import (
	"errors"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/engine/shard"
	"github.com/ringlog/ringlog/replication/cluster"
	"github.com/ringlog/ringlog/replication/controller"
	"github.com/ringlog/ringlog/replication/isr"
	"github.com/twmb/franz-go/pkg/kerr"
)

// codeFor maps broker and engine errors to Kafka error codes (kerr holds Kafka's table;
// the numbers are Kafka's wire format). The ringlog protocol's own mapping is netio's
// codeFor: the two protocols number errors differently, so each keeps its table.
func codeFor(err error) int16 {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, isr.ErrNotLeader):
		return kerr.NotLeaderForPartition.Code // NOT_LEADER_OR_FOLLOWER: clients refresh metadata and retry
	case errors.Is(err, isr.ErrFencedLeaderEpoch):
		return kerr.FencedLeaderEpoch.Code
	case errors.Is(err, isr.ErrUnknownLeaderEpoch), errors.Is(err, isr.ErrNotReplica):
		return kerr.UnknownLeaderEpoch.Code
	case errors.Is(err, cluster.ErrTimedOut): // before the causes it names
		return kerr.RequestTimedOut.Code
	case errors.Is(err, controller.ErrNotController), errors.Is(err, cluster.ErrNoController):
		return kerr.NotController.Code
	case errors.Is(err, controller.ErrTopicExists):
		return kerr.TopicAlreadyExists.Code
	case errors.Is(err, controller.ErrNotEnoughBrokers):
		return kerr.InvalidReplicationFactor.Code
	case errors.Is(err, controller.ErrInvalidTopic):
		return kerr.InvalidPartitions.Code
	case errors.Is(err, controller.ErrUnknownTopic):
		return kerr.UnknownTopicOrPartition.Code
	case errors.Is(err, shard.ErrUnknownTopicOrPartition):
		return kerr.UnknownTopicOrPartition.Code
	case errors.Is(err, shard.ErrTopicExists):
		return kerr.TopicAlreadyExists.Code
	case errors.Is(err, shard.ErrInvalidTopic):
		return kerr.InvalidTopicException.Code
	case errors.Is(err, shard.ErrInvalidPartitions):
		return kerr.InvalidPartitions.Code
	case errors.Is(err, shard.ErrInvalidConfig):
		return kerr.InvalidConfig.Code
	case errors.Is(err, shard.ErrNotEnoughReplicas):
		return kerr.NotEnoughReplicas.Code
	case errors.Is(err, shard.ErrThrottled):
		return kerr.ThrottlingQuotaExceeded.Code
	case errors.Is(err, shard.ErrShuttingDown):
		return kerr.BrokerNotAvailable.Code
	case errors.Is(err, engine.ErrOffsetOutOfRange):
		return kerr.OffsetOutOfRange.Code
	case errors.Is(err, engine.ErrCorruptBatch):
		return kerr.CorruptMessage.Code
	case errors.Is(err, engine.ErrBatchTooLarge):
		return kerr.MessageTooLarge.Code
	case errors.Is(err, engine.ErrProducerFenced):
		return kerr.InvalidProducerEpoch.Code
	case errors.Is(err, engine.ErrOutOfOrderSequence):
		return kerr.OutOfOrderSequenceNumber.Code
	case errors.Is(err, engine.ErrDuplicateSequence):
		return kerr.DuplicateSequenceNumber.Code
	case errors.Is(err, engine.ErrInvalidProducerName), errors.Is(err, engine.ErrTooManyProducers):
		return kerr.InvalidRequest.Code
	case errors.Is(err, engine.ErrInvalidBatch):
		return kerr.CorruptMessage.Code
	case errors.Is(err, engine.ErrProducerIDsUnavailable): // retriable, as Kafka answers while its block is not ready
		return kerr.CoordinatorLoadInProgress.Code
	case errors.Is(err, engine.ErrLogFailed), errors.Is(err, engine.ErrCorruptLog),
		errors.Is(err, engine.ErrDiskFull), errors.Is(err, engine.ErrStorageWrite):
		return kerr.KafkaStorageError.Code
	}
	return kerr.UnknownServerError.Code
}

// message is err's text for a response's nullable ErrorMessage.
func message(err error) *string {
	if err == nil {
		return nil
	}
	s := err.Error()
	return &s
}
