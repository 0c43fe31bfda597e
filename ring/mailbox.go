package ring

import "sync/atomic"

// mailbox is a bounded multi-producer, single-consumer queue of closures (Dmitry Vyukov's
// bounded queue: each cell carries a sequence number that says whose turn it is). Producers
// are any goroutines (Reactor.Post); the consumer is the reactor loop. push never blocks.
type mailbox struct {
	slots []mailboxCell
	mask  uint64
	_     [56]byte
	tail  atomic.Uint64 // producers
	_     [56]byte
	head  atomic.Uint64 // consumer
}

type mailboxCell struct {
	seq atomic.Uint64
	fn  func()
}

func (m *mailbox) init(entries uint32) {
	m.slots = make([]mailboxCell, entries)
	m.mask = uint64(entries - 1)
	for i := range m.slots {
		m.slots[i].seq.Store(uint64(i))
	}
}

// push enqueues fn; false when the mailbox is full.
func (m *mailbox) push(fn func()) bool {
	for {
		pos := m.tail.Load()
		cell := &m.slots[pos&m.mask]
		seq := cell.seq.Load()
		switch {
		case seq == pos:
			if m.tail.CompareAndSwap(pos, pos+1) {
				cell.fn = fn
				cell.seq.Store(pos + 1)
				return true
			}
		case seq < pos:
			return false // full: the consumer has not freed this cell yet
		}
		// Another producer took pos; retry with a fresh tail.
	}
}

// pop dequeues the next closure, or nil when empty. Consumer only.
func (m *mailbox) pop() func() {
	pos := m.head.Load()
	cell := &m.slots[pos&m.mask]
	if cell.seq.Load() != pos+1 {
		return nil
	}
	fn := cell.fn
	cell.fn = nil
	m.head.Store(pos + 1)
	cell.seq.Store(pos + m.mask + 1)
	return fn
}

func (m *mailbox) empty() bool {
	pos := m.head.Load()
	return m.slots[pos&m.mask].seq.Load() != pos+1
}
