package engine

// Directory fsyncs shared between the names that wait for one (session 14, issue 14).
//
// A name created, renamed or unlinked in a partition directory is durable once an fsync of
// the directory that started after the change completed (docs/storage.md, "Crash model").
// The log fsyncs its directory for several reasons: the retention checkpoint's atomic write
// (every retention pass that retires a segment), Sync and BeginSync when a roll or a producer
// snapshot added names (dirGen), and — until session 14 — the recycle pool's preparation of
// every retired .log, for its recycled.<inode> batch map (recycle.go). On ext4 each of them
// costs a device cache flush; at a retention limit the pool's was one of the five per roll
// and partition (docs/benchmarks.md, "Session 14: device cache flushes on the recycled
// path").
//
// dirSyncs numbers the log's directory fsyncs in the order they start and remembers the
// highest number among those that completed successfully. A name changed before mark =
// started was read is durable once covered > mark: some fsync numbered above mark started
// after the change and completed. A pool file's map is renamed into place in the background
// before the owner collects the file (collectPooled), so its mark is taken at collection;
// the file is handed to a new segment only once covered passes it (takePooled), and the
// directory fsync that gets it there is one the log does anyway — the next retention
// checkpoint's, or a sync's. At a retention limit that checkpoint comes one roll after the
// retirement, so the pool holds one file ahead: the first spare that finds only waiting
// files takes a new file, and a second one in a row issues the fsync for them (syncPoolDir,
// prepareSpare). Owner goroutine only.
type dirSyncs struct {
	started uint64 // directory fsyncs started so far; the last one's number
	covered uint64 // the highest number of a directory fsync that completed successfully
}

// start numbers a directory fsync about to be issued.
func (d *dirSyncs) start() uint64 {
	d.started++
	return d.started
}

// done records that directory fsync seq completed successfully.
func (d *dirSyncs) done(seq uint64) { d.covered = max(d.covered, seq) }

// durableSince reports whether names changed before mark (a value of started) are durable.
func (d *dirSyncs) durableSince(mark uint64) bool { return d.covered > mark }

// takePooled takes the newest pool file whose map name is durable (collectPooled first).
// With none, but one whose name waits for a directory fsync, a log without asynchronous
// file ops fsyncs the directory here (its rolls block anyway) and takes it; a log with them
// leaves it to syncPoolDir and takes none.
func (l *Log) takePooled() (pooledFile, bool) {
	l.collectPooled()
	for i := len(l.recyclePool) - 1; i >= 0; i-- {
		if f := l.recyclePool[i]; l.dirs.durableSince(f.dirMark) {
			l.recyclePool = append(l.recyclePool[:i], l.recyclePool[i+1:]...)
			return f, true
		}
	}
	if len(l.recyclePool) == 0 || l.fileJobsAsync() {
		return pooledFile{}, false
	}
	seq := l.dirs.start()
	noteSyncs(syncPoolMapDir, 1)
	if err := syncDir(l.fio, l.dir); err != nil {
		l.cfg.Logger.Warn("sync dir for recycled segment files", "dir", l.dir, "err", err)
		return pooledFile{}, false
	}
	l.dirs.done(seq)
	return l.takePooled()
}

// poolWaitsForDir reports whether a pool file is there but none can be taken until a
// directory fsync completes.
func (l *Log) poolWaitsForDir() bool {
	l.collectPooled()
	if len(l.recyclePool) == 0 {
		return false
	}
	for _, f := range l.recyclePool {
		if l.dirs.durableSince(f.dirMark) {
			return false
		}
	}
	return true
}

// syncPoolDir starts a directory fsync through the ring (a fileJobs step: open, fsync,
// close) for pool files whose map names no other directory fsync has covered yet
// (prepareSpare, when the spare would otherwise take a new file). One at a time; a failure
// is logged and releases the files that waited for it.
func (l *Log) syncPoolDir() {
	if l.poolDirSyncing {
		return
	}
	l.poolDirSyncing = true
	seq := l.dirs.start() // the fsync starts after this: after every rename collected so far
	noteSyncs(syncPoolMapDir, 1)
	l.startFileJob([]fileStep{{from: l.dir, dirSynced: func(err error) {
		l.poolDirSyncing = false
		if err == nil {
			l.dirs.done(seq)
			return
		}
		// The files waiting for it go (a failing directory fsync is an I/O error: the
		// next rolls take new files, and retried fsyncs would follow every append).
		kept := l.recyclePool[:0]
		var waiting []pooledFile
		for _, f := range l.recyclePool {
			if l.dirs.durableSince(f.dirMark) {
				kept = append(kept, f)
			} else {
				waiting = append(waiting, f)
			}
		}
		l.recyclePool = kept
		if len(waiting) > 0 {
			l.releasePool(waiting)
		}
	}}}, nil)
}
