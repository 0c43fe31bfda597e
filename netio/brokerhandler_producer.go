package netio

import (
	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/netio/wire"
)

// initProducerID answers InitProducerId from the broker's producer id registry.
func (h *BrokerHandler) initProducerID(body *wire.InitProducerIDRequest) *wire.InitProducerIDResponse {
	current := engine.ProducerIdentity{ID: body.ProducerID, Epoch: body.ProducerEpoch}
	if current.ID < 0 {
		current = engine.NoProducer
	}
	id, err := h.b.InitProducerID(body.Name, current)
	if err != nil {
		return &wire.InitProducerIDResponse{ErrorCode: codeFor(err), ErrorMessage: err.Error(), ProducerID: -1, ProducerEpoch: -1}
	}
	return &wire.InitProducerIDResponse{ProducerID: id.ID, ProducerEpoch: id.Epoch}
}
