package batch

import "testing"

func TestSetProducer(t *testing.T) {
	bl := NewBuilder(BuilderOptions{ProducerID: 1, ProducerEpoch: 2, BaseSequence: 3, Idempotent: true})
	bl.Append(1000, []byte("k"), []byte("v"), nil)
	bl.Append(1001, []byte("k2"), []byte("v2"), nil)
	b, err := bl.Build(nil)
	if err != nil {
		t.Fatal(err)
	}
	SetProducer(b, 77, 5, 1<<30)
	h, err := Validate(b)
	if err != nil {
		t.Fatalf("after SetProducer: %v", err)
	}
	if h.ProducerID != 77 || h.ProducerEpoch != 5 || h.BaseSequence != 1<<30 || h.RecordCount != 2 {
		t.Fatalf("header %+v", h)
	}
	if err := Decode(b, nil); err != nil {
		t.Fatal(err)
	}
}
