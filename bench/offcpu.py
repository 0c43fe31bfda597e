#!/usr/bin/env python3
"""Off-CPU time of the shard loop threads, by where they blocked.

Record the scheduler switches of a benchmark run, then feed perf's script output here
(docs/benchmarks.md, "Retention's checkpoint off the loop", session 11; the roll's own files
since session 13):

    perf record -e sched:sched_switch -g -o offcpu.data ./shard.test -test.run XXX \
        -test.benchtime 1500ms -test.bench 'BenchmarkDirectAppend/mode=churn-recycle$/batch=64KiB'
    perf script -i offcpu.data | python3 bench/offcpu.py [-v]

A shard loop thread is one whose stacks ever show ring.(*Reactor).Run (a thread that ran a
reactor that has since stopped counts too: its idle waits land in "blocked, other"). Every
interval from a loop thread's switch-out to its next switch-in is attributed by the
switch-out stack: preempted (prev_state R) or blocked (any other state), blocked split by the
first category whose frame names match (a tuple of names: all of them). -v adds the top
blocked stacks.
"""
import re
import sys
from collections import defaultdict

hdr = re.compile(r'^\s*(\S.*?)\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+sched:sched_switch:\s+(.*)$')
fields = re.compile(r'(\w+)=(\S+)')

CATS = [
    ('roll: new segment files, blocking (newSegment: create, pool rename, index files; O_DIRECT open)', ('engine.(*Log).newSegment', 'engine.openSegmentFiles', ('engine.(*Log).roll', 'engine.openDirectWriter'))),
    ('roll: sealed segment batch map, blocking (writeOwnBatchMap)', (('engine.(*Log).roll', 'engine.(*Log).writeOwnBatchMap'),)),
    ('roll: files off the loop (spare preparation, names, batch map; rollasync.go)', ('engine.(*Log).prepareSpare', 'engine.(*Log).spareOpened', 'engine.(*Log).takeSpare', 'engine.(*Log).nameSegment', 'engine.(*Log).segmentNamed', 'engine.(*Log).startOwnBatchMap', 'engine.(*Log).awaitRollNames', 'engine.(*Log).awaitRollFiles', 'engine.(*fileJob).onOpened')),
    ('retention checkpoint, blocking (writeStartOffset: write, fsync, rename, dir fsync)', ('engine.writeStartOffset', 'engine.writeFileAtomic')),
    ('retention, other (startRetention open, completions, CompleteRetention retire renames)', ('engine.(*Log).EnforceRetention', 'engine.(*Log).CompleteRetention', 'engine.(*Log).startRetention', 'engine.(*Log).retention', 'engine.(*Log).awaitRetention')),
    ('Close: producer snapshot write (writeProducerSnapshot)', (('engine.(*Log).Close', 'engine.(*Log).writeProducerSnapshot'),)),
    ('roll: producer snapshot write (writeProducerSnapshot)', ('engine.(*Log).writeProducerSnapshot',)),
    ('roll: producer snapshot off the loop (startSnapshot open, completions, awaitSnapshot)', ('engine.(*Log).startSnapshot', 'engine.(*Log).snapshotWritten', 'engine.(*Log).snapshotRenamed', 'engine.(*Log).snapshotInPlace', 'engine.(*Log).awaitSnapshot')),
    ('roll, other', ('engine.(*Log).roll',)),
    ('ftruncate (seal cut)', ('do_sys_ftruncate', 'do_ftruncate')),
    ('open/close of the logs (benchmark set-up and tear-down)', ('engine.OpenLog', 'engine.(*Log).Close')),
    ('AwaitWrites elsewhere', ('AwaitWrites',)),
    ('waiting in the ring (idle)', ('io_uring_enter', '__x64_sys_io_uring_enter')),
]

events = []  # (ts, prev_pid, prev_state, next_pid, stack)
cur = None
for line in sys.stdin:
    m = hdr.match(line)
    if m:
        if cur:
            events.append(cur)
        f = dict(fields.findall(m.group(5)))
        cur = [float(m.group(4)), int(f.get('prev_pid', -1)), f.get('prev_state', '?'), int(f.get('next_pid', -1)), []]
        continue
    if cur is not None and line.strip():
        parts = line.split(None, 1)
        if len(parts) == 2:
            cur[4].append(parts[1].strip())
if cur:
    events.append(cur)

loops = set()
for ts, prev, state, nxt, stack in events:
    if any('ring.(*Reactor).Run' in fr for fr in stack):
        loops.add(prev)

def matches(key, stack):
    """key is a frame name, or a tuple of frame names that must all be on the stack."""
    if isinstance(key, tuple):
        return all(matches(k, stack) for k in key)
    return any(key in fr for fr in stack)


out = {}
total = defaultdict(float)
count = defaultdict(int)
for ts, prev, state, nxt, stack in events:
    if nxt in out:
        t0, cat = out.pop(nxt)
        total[cat] += ts - t0
        count[cat] += 1
    if prev in loops:
        if state.startswith('R'):
            cat = 'preempted while runnable'
        else:
            cat = 'blocked, other'
            for name, keys in CATS:
                if any(matches(k, stack) for k in keys):
                    cat = name
                    break
        out[prev] = (ts, cat)

print('shard loop threads:', len(loops))
for cat in sorted(total, key=lambda c: -total[c]):
    print(f'{total[cat]:8.3f} s  {count[cat]:7d} switches  {cat}')
if len(sys.argv) > 1 and sys.argv[1] == '-v':
    # top blocked-other stacks
    agg = defaultdict(float)
    out = {}
    for ts, prev, state, nxt, stack in events:
        if nxt in out:
            t0, key = out.pop(nxt)
            agg[key] += ts - t0
        if prev in loops and not state.startswith('R'):
            out[prev] = (ts, ' <- '.join(fr.split(' ')[0] for fr in stack[:14]))
    for k in sorted(agg, key=lambda k: -agg[k])[:25]:
        print(f'{agg[k]:8.3f} {k}')
