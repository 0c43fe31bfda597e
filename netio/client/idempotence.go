package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ringlog/ringlog/netio/wire"
)

// ProducerIdentity is an idempotent producer's id and epoch as the broker handed them out.
type ProducerIdentity struct {
	ID    int64
	Epoch int16
}

// InitProducerID asks the broker for a producer id and epoch (InitProducerId). name may be
// empty; current is the identity the caller holds, or {-1, -1}. The bundled Producer calls
// it itself; it is exported for tools and tests.
func (c *Client) InitProducerID(ctx context.Context, name string, current ProducerIdentity) (ProducerIdentity, error) {
	var resp wire.InitProducerIDResponse
	req := &wire.InitProducerIDRequest{Name: name, ProducerID: current.ID, ProducerEpoch: current.Epoch}
	if err := c.callHome(ctx, req, &resp); err != nil {
		return ProducerIdentity{-1, -1}, fmt.Errorf("init producer id: %w", err)
	}
	if err := wire.CodeError(resp.ErrorCode, resp.ErrorMessage); err != nil {
		return ProducerIdentity{-1, -1}, fmt.Errorf("init producer id: %w", err)
	}
	return ProducerIdentity{resp.ProducerID, resp.ProducerEpoch}, nil
}

// Identity returns the producer id and epoch in use ({-1, -1} before the first Send, and
// always without idempotence).
func (p *Producer) Identity() ProducerIdentity {
	p.mu.Lock()
	defer p.mu.Unlock()
	return ProducerIdentity{p.identity.id, p.identity.epoch}
}

// ensureIdentity gets the producer its id and epoch before its first record is queued.
func (p *Producer) ensureIdentity(ctx context.Context) error {
	if !p.idempotent {
		return nil
	}
	p.mu.Lock()
	ready, fatal := p.identity.id >= 0, p.fatal
	p.mu.Unlock()
	if fatal != nil {
		return fatal
	}
	if ready {
		return nil
	}
	p.idMu.Lock()
	defer p.idMu.Unlock()
	p.mu.Lock()
	ready = p.identity.id >= 0
	p.mu.Unlock()
	if ready {
		return nil
	}
	id, err := p.c.InitProducerID(ctx, p.cfg.Name, ProducerIdentity{-1, -1})
	if err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	p.mu.Lock()
	p.identity = producerIdentity{id.ID, id.Epoch}
	p.mu.Unlock()
	return nil
}

// bumpReadyLocked reports whether the producer can move to a new epoch now: a batch failed
// for good, nothing is in flight, and no batch sent before is still unresolved. Such a batch
// may already be in the log under the old epoch; renumbered under the new one it would be
// written twice. So it first goes again under the old epoch, alone: it is then acknowledged
// (written before, or now), or refused OUT_OF_ORDER_SEQUENCE because a batch before it is
// missing — proof that it is not in the log, and safe to renumber — or it fails for good.
func (p *Producer) bumpReadyLocked(now time.Time) bool {
	return p.bumping && p.inflightTotal == 0 && !p.probesPendingLocked() && !now.Before(p.bumpRetryAt)
}

// probesPendingLocked reports whether a queued batch was sent before (outcome unknown).
func (p *Producer) probesPendingLocked() bool {
	for _, ps := range p.parts {
		for _, b := range ps.sealed {
			if b.state == batchQueued && b.sent {
				return true
			}
		}
	}
	return false
}

// bumpEpoch moves the producer to a new epoch (a new id without a Name) once no batch is in
// flight, after a batch failed for good: every unacknowledged batch is renumbered from
// sequence 0 under the new identity, so the partitions' sequences have no hole. A named
// producer passes the identity it holds; if a newer instance took the name meanwhile the
// broker refuses and this producer is fenced. Sender goroutine only.
func (p *Producer) bumpEpoch() {
	p.mu.Lock()
	current := ProducerIdentity{-1, -1}
	if p.cfg.Name != "" {
		current = ProducerIdentity{p.identity.id, p.identity.epoch}
	}
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), p.c.cfg.RequestTimeout)
	id, err := p.c.InitProducerID(ctx, p.cfg.Name, current)
	cancel()
	p.mu.Lock()
	switch {
	case errors.Is(err, wire.ErrInvalidProducerEpoch):
		p.fenceLocked(fmt.Errorf("%w: %w", ErrFenced, err))
	case err != nil:
		p.bumpRetryAt = time.Now().Add(p.cfg.RetryBackoff)
		if p.bumpAttempts++; p.bumpAttempts > p.cfg.Retries {
			// Bounded like a batch's retries: fail what waits, try again for later records.
			p.bumpAttempts = 0
			for _, ps := range p.parts {
				p.failQueuedLocked(ps, fmt.Errorf("produce to %s/%d: move to a new producer epoch after a failed batch: %w", ps.topic, ps.partition, err))
			}
		}
	default:
		p.identity = producerIdentity{id.ID, id.Epoch}
		p.bumping, p.bumpAttempts = false, 0
		for _, ps := range p.parts {
			p.renumberLocked(ps)
		}
	}
	p.mu.Unlock()
	p.runCallbacks()
	p.signal()
}

// renumberLocked restamps the unacknowledged batches of ps with the producer's identity and
// sequences from 0. No batch is in flight. A queued batch with an acknowledged one behind it
// was written (the broker takes a partition's batches in sequence order): it completes as
// written, offset unknown, rather than going again under the new epoch.
func (p *Producer) renumberLocked(ps *partState) {
	written := false
	for i := len(ps.sealed) - 1; i >= 0; i-- {
		b := ps.sealed[i]
		if b.state == batchAcked {
			written = true
		} else if written {
			b.state, b.offset = batchAcked, -1
		}
	}
	p.completeAckedLocked(ps)
	seq := int32(0)
	for _, b := range ps.sealed {
		batchSetProducer(b.data, p.identity, seq)
		b.sent = false
		seq = addSequence(seq, len(b.records))
	}
	ps.nextSeq = seq
}

// knownPartitions is the partition count of topic from metadata fetched before, stale or
// not (a topic's partition count never shrinks), so that Send keeps queueing while the
// broker is briefly unreachable and the sender's retries carry the records over.
func (c *Client) knownPartitions(topic string) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if tm := c.topics[topic]; tm != nil {
		return len(tm.partitions), true
	}
	return 0, false
}
