package kafka

import (
	"github.com/ringlog/ringlog/engine"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// InitProducerId (key 22), v0-v4: an idempotent producer's id and epoch from the broker's
// producer id registry (the ringlog protocol's anonymous producers: a new id each time).
// A transactional id is refused with INVALID_REQUEST: transactions are not supported.
var initProducerIDAPI = api{
	key: keyInitProducerID, min: 0, max: 4,
	serve: func(s *Server, p *pending, req kmsg.Request) {
		r := req.(*kmsg.InitProducerIDRequest)
		if r.TransactionalID != nil {
			p.reply(failInitProducerID(req, kerr.InvalidRequest.Code, ""), nil)
			return
		}
		go func() { // may fsync the producer id file
			resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
			id, err := s.b.InitProducerID("", engine.NoProducer)
			resp.ErrorCode, resp.ProducerID, resp.ProducerEpoch = codeFor(err), id.ID, id.Epoch
			if err != nil {
				resp.ProducerID, resp.ProducerEpoch = -1, -1
			}
			p.reply(resp, nil)
		}()
	},
	fail: failInitProducerID,
}

func failInitProducerID(req kmsg.Request, code int16, _ string) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ErrorCode, resp.ProducerID, resp.ProducerEpoch = code, -1, -1
	return resp
}
