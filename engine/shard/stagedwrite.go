package shard

// Staged page-cache appends (engine/stagedwrite.go): a produce's batches are validated,
// given their offsets and staged by the log, and every partition's staged batches of one
// loop turn go to its file in one pwritev, from a zero-delay reactor timer that runs after
// the turn's completions and mailbox drain. Several connections' produces to one partition
// in a turn then cost one system call instead of one each. Until the write the produces
// wait in the partition's pendingAppends (directwrite.go), and the log's written hook hands
// them to the core in offset order, as for asynchronous direct writes: nobody reads, syncs
// or acknowledges a staged byte.

// enableStagedWrites turns staging on for p's log (page-cache mode), unless the broker was
// told to write each append at once. A test FileIO (Config.WrapFileIO) sees the staged
// writes as they happen, at the end of the turn, so the fault and crash drills cover them.
func (s *Shard) enableStagedWrites(p *partition) {
	if s.b.cfg.WriteEachAppend {
		return
	}
	l := p.log
	l.SetStagedWrites(func() { s.writesDone(p, l) })
}

// noteStaged puts p in this turn's list when its log has staged bytes, and arms the timer
// that writes them.
func (s *Shard) noteStaged(p *partition) {
	if p.stagedIn || !p.log.WritesPending() || p.log.Err() != nil {
		return
	}
	p.stagedIn = true
	s.staged = append(s.staged, p)
	if s.stagedTimer == nil {
		s.stagedTimer = s.r.AfterFunc(0, s.writeStaged)
		return
	}
	if len(s.staged) == 1 {
		s.stagedTimer.Reset(0)
	}
}

// writeStaged writes every listed partition's staged batches, one pwritev each; each log's
// written hook answers its produces (or fails them, and the partition, when the write
// failed: writesDone says so), then runs the turn's EndTurn if the appends asked for one
// (runFlushNow). Loop goroutine.
func (s *Shard) writeStaged() {
	for i := 0; i < len(s.staged); i++ { // a hook's answer may stage more: they join the round
		p := s.staged[i]
		s.staged[i] = nil
		p.stagedIn = false
		p.log.WriteStaged()
	}
	s.staged = s.staged[:0]
	s.runFlushNow()
}
