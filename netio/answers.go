package netio

import (
	"sync"
	"time"
)

// PartitionAnswers gathers the per-partition answers of one produce request, which shard
// loops give one by one, and replies once all are in — or, with a timeout (an acks=all
// produce's timeout_ms), once the timeout passes although some partitions still wait for
// their followers. Late answers are then dropped. The Kafka listener (netio/kafka) answers
// produces with it; BrokerHandler's pooled produceCall follows the same rule without
// allocating per request (the ring driver's hot path).
//
// The response a caller fills is guarded by the PartitionAnswers' lock: Lock while
// starting the partitions, and set an answer's fields only inside Answer's set.
type PartitionAnswers struct {
	mu        sync.Mutex
	pending   int    // partitions not answered yet; guarded by mu
	answered  []bool // by request position; nil without a timeout; guarded by mu
	replied   bool   // guarded by mu
	stopTimer func() bool
	// reply sends the response, under mu, exactly once; waiting is nil when every
	// partition answered, else it marks (by request position) those the timeout cut off.
	reply func(waiting []bool)
}

// NewPartitionAnswers waits for total answers; reply sends the response (see the field).
// With total 0 it replies at once.
func NewPartitionAnswers(total int, reply func(waiting []bool)) *PartitionAnswers {
	a := &PartitionAnswers{pending: total, reply: reply}
	if total == 0 {
		a.replied = true
		reply(nil)
	}
	return a
}

// Timeout arms the timeout (afterFunc as time.AfterFunc's, returning its Stop). Call it
// before the first answer.
func (a *PartitionAnswers) Timeout(d time.Duration, afterFunc func(time.Duration, func()) func() bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.replied {
		return
	}
	a.answered = make([]bool, a.pending)
	a.stopTimer = afterFunc(d, a.timedOut)
}

// Lock and Unlock hold back answers (and the timeout) while the caller starts partitions.
func (a *PartitionAnswers) Lock()   { a.mu.Lock() }
func (a *PartitionAnswers) Unlock() { a.mu.Unlock() }

// Answer records partition idx's answer (set writes it into the response) unless the
// request was answered already; the last answer replies.
func (a *PartitionAnswers) Answer(idx int, set func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.AnswerLocked(idx, set)
}

// AnswerLocked is Answer with the lock held.
func (a *PartitionAnswers) AnswerLocked(idx int, set func()) {
	if a.replied {
		return
	}
	if a.answered != nil {
		a.answered[idx] = true
	}
	set()
	if a.pending--; a.pending == 0 {
		a.replied = true
		if a.stopTimer != nil {
			a.stopTimer()
		}
		a.reply(nil)
	}
}

// Expire is the timeout passing now (a request whose timeout_ms is 0 or less): the
// partitions still waiting are cut off. The timeout must have been armed (Timeout).
func (a *PartitionAnswers) Expire() { a.timedOut() }

func (a *PartitionAnswers) timedOut() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.replied {
		return
	}
	a.replied = true
	waiting := make([]bool, len(a.answered))
	for i, done := range a.answered {
		waiting[i] = !done
	}
	a.reply(waiting)
}
