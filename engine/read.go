package engine

import (
	"fmt"
	"os"
	"slices"

	"github.com/ringlog/ringlog/ring"
)

// Piece is one contiguous part of a read. Exactly one of File and Data is set:
//   - File: bytes [Position, Position+Size) of a segment file, for sendfile/splice with an
//     explicit offset (never the file's shared position).
//   - Data: bytes already in memory (direct mode's chunk cache); immutable, may be retained.
type Piece struct {
	File     *os.File
	Position int64
	Size     int64
	Data     []byte
}

// ReadResult is what Read returns: whole batches, in offset order, from one segment.
//
// File pieces refer to the segment's open file; they stay valid until the owner next calls
// TruncateTo, EnforceRetention, CompleteRetention, DeleteRecordsBefore or Close on the log
// (which may close it).
type ReadResult struct {
	Pieces []Piece
	// Size is the total byte count of all pieces.
	Size int64
	// FirstOffset is the base offset of the first batch returned (<= the requested offset
	// when the fetch lands mid-batch). NextOffset is the offset after the last batch
	// returned; a fetch continuing the stream asks for NextOffset.
	FirstOffset, NextOffset int64

	fio ring.FileIO
}

// AppendTo appends the result's bytes to dst, reading file pieces through the log's FileIO;
// call it on the log's goroutine (a Reactor FileIO belongs to its thread).
func (r *ReadResult) AppendTo(dst []byte) ([]byte, error) {
	for _, p := range r.Pieces {
		if p.File == nil {
			dst = append(dst, p.Data...)
			continue
		}
		n := len(dst)
		dst = slices.Grow(dst, int(p.Size))[:n+int(p.Size)]
		if err := preadFull(r.fio, int(p.File.Fd()), dst[n:], p.Position); err != nil {
			return dst[:n], fmt.Errorf("read %s [%d,%d): %w", p.File.Name(), p.Position, p.Position+p.Size, err)
		}
	}
	return dst, nil
}
