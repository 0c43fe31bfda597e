package cluster

import (
	"errors"
	"testing"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/replication/controller"
)

// TestProducerNameLimitsAgree: the controller's name limit is the broker's, so a name a
// single broker takes is never refused by a cluster for its length.
func TestProducerNameLimitsAgree(t *testing.T) {
	if controller.ProducerNameBytesMax != engine.ProducerNameBytesMax {
		t.Fatalf("controller allows names of %d bytes, the broker %d", controller.ProducerNameBytesMax, engine.ProducerNameBytesMax)
	}
}

// TestProducerNameErrors: the controller's refusals become the engine's errors (which the
// listeners answer with their codes); anything else leaves ids unavailable (retriable).
func TestProducerNameErrors(t *testing.T) {
	for _, c := range []struct{ in, want error }{
		{controller.ErrProducerFenced, engine.ErrProducerFenced},
		{controller.ErrInvalidProducerName, engine.ErrInvalidProducerName},
		{controller.ErrTooManyProducers, engine.ErrTooManyProducers},
		{ErrNoController, engine.ErrProducerIDsUnavailable},
	} {
		if err := producerNameError("n", c.in); !errors.Is(err, c.want) || !errors.Is(err, c.in) {
			t.Errorf("%v: %v, want it to wrap %v", c.in, err, c.want)
		}
	}
}
