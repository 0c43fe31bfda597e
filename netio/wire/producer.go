package wire

// ---------------------------------------------------------------------------------------
// InitProducerId (key 10)

// InitProducerIDRequest asks the broker for an idempotent producer's id and epoch (Kafka's
// InitProducerId). Name is the producer's stable name (Kafka's transactional.id), empty for
// none: a name gets the same id each time with the epoch bumped, fencing older instances.
// ProducerID and ProducerEpoch are the identity the producer holds, -1 and -1 when it starts:
// a running producer that must move to a new epoch (a batch failed for good and left a hole
// in its sequences) passes them, and is refused with ErrInvalidProducerEpoch if a newer
// instance has taken the name meanwhile.
type InitProducerIDRequest struct {
	Name          string
	ProducerID    int64
	ProducerEpoch int16
}

// InitProducerIDResponse carries the identity to stamp into every batch (with a base
// sequence per partition counting from 0).
type InitProducerIDResponse struct {
	ErrorCode     ErrorCode
	ErrorMessage  string
	ProducerID    int64
	ProducerEpoch int16
}

func (*InitProducerIDRequest) API() APIKey  { return APIInitProducerID }
func (*InitProducerIDResponse) API() APIKey { return APIInitProducerID }

func (m *InitProducerIDRequest) AppendTo(dst []byte) []byte {
	dst = appendString(dst, m.Name)
	dst = appendInt64(dst, m.ProducerID)
	return appendInt16(dst, m.ProducerEpoch)
}

func (m *InitProducerIDRequest) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.Name = r.string()
	m.ProducerID = r.int64()
	m.ProducerEpoch = r.int16()
	return r.done("InitProducerId request")
}

func (m *InitProducerIDResponse) AppendTo(dst []byte) []byte {
	dst = appendInt16(dst, int16(m.ErrorCode))
	dst = appendString(dst, m.ErrorMessage)
	dst = appendInt64(dst, m.ProducerID)
	return appendInt16(dst, m.ProducerEpoch)
}

func (m *InitProducerIDResponse) ReadFrom(b []byte) error {
	r := reader{buf: b}
	m.ErrorCode = ErrorCode(r.int16())
	m.ErrorMessage = r.string()
	m.ProducerID = r.int64()
	m.ProducerEpoch = r.int16()
	return r.done("InitProducerId response")
}
