package netio

import "fmt"

// Admission is one connection of another protocol's listener (netio/kafka) admitted under
// this server's limits, so that both protocols share one set: it counts against
// ConnectionsMax and ConnectionsPerAddressMax, and its request and response bytes are
// charged to its own ConnBufferBytesMax, its client address's AddressBufferBytesMax and a
// shard's share of ServerBufferBytesMax, exactly as a ringlog-protocol connection's are.
// FetchFiles is charged per segment descriptor its unsent fetch responses hold.
type Admission struct {
	s          *Server
	addr       *address
	budgets    budgets
	FetchFiles *Charges
	// ID is unique among this server's connections of either protocol.
	ID uint64
}

// Admit admits a connection from remote (host:port) or says which limit refused it.
func (s *Server) Admit(remote string) (*Admission, error) {
	if s.connCount.Add(1) > int64(s.cfg.ConnectionsMax) {
		s.connCount.Add(-1)
		s.stats.refusedConns.Add(1)
		return nil, fmt.Errorf("%d connections open (ConnectionsMax)", s.cfg.ConnectionsMax)
	}
	id := s.nextConnID.Add(1)
	shard := int(id % uint64(s.cfg.Shards))
	a := s.admitAddress(remote, shard)
	if a == nil {
		s.connCount.Add(-1)
		return nil, fmt.Errorf("%d connections open from that address (ConnectionsPerAddressMax)", s.cfg.ConnectionsPerAddressMax)
	}
	return &Admission{s: s, addr: a, budgets: s.connBudgets(a, shard), FetchFiles: s.fetchFiles(a), ID: id}, nil
}

// Acquire charges n bytes, waiting for releases; false once stop is closed or the server
// is closing. A single charge above a budget is admitted when that budget is empty.
func (a *Admission) Acquire(n int64, stop <-chan struct{}) bool { return a.budgets.acquire(n, stop) }

// Force charges n bytes whatever the budgets hold (a reply already built).
func (a *Admission) Force(n int64) { a.budgets.force(n) }

// Release gives back n charged bytes.
func (a *Admission) Release(n int64) { a.budgets.release(n) }

// Leave ends the admission once every charge was released.
func (a *Admission) Leave() {
	a.s.addrs.leave(a.addr)
	a.s.connCount.Add(-1)
}

// Counted reports a request read and a response written in the server's Stats.
func (a *Admission) Counted(requests, responses int64) {
	a.s.stats.requests.Add(requests)
	a.s.stats.responses.Add(responses)
}
