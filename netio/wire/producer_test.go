package wire

import "testing"

func FuzzInitProducerIdRequest(f *testing.F) {
	fuzzMessage(f, func() Message { return new(InitProducerIDRequest) }, sampleRequests())
}
func FuzzInitProducerIdResponse(f *testing.F) {
	fuzzMessage(f, func() Message { return new(InitProducerIDResponse) }, sampleResponses())
}
