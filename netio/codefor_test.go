package netio

import (
	"fmt"
	"testing"

	"github.com/ringlog/ringlog/engine"
	"github.com/ringlog/ringlog/netio/wire"
	"golang.org/x/sys/unix"
)

// TestCodeForStorageErrors: storage failures reach clients as STORAGE_ERROR (retriable),
// a poison pill or a corrupt stored batch as CORRUPT_MESSAGE, never as UNKNOWN.
func TestCodeForStorageErrors(t *testing.T) {
	cases := []struct {
		err  error
		want wire.ErrorCode
	}{
		{fmt.Errorf("append: %w: /data on /: %w", engine.ErrDiskFull, unix.ENOSPC), wire.ErrStorage},
		{fmt.Errorf("append: %w: /data: %w", engine.ErrStorageWrite, unix.EIO), wire.ErrStorage},
		{fmt.Errorf("x: %w", engine.ErrLogFailed), wire.ErrStorage},
		{fmt.Errorf("read: %w: %w: offsets [7, 15)", engine.ErrCorruptLog, engine.ErrCorruptBatch), wire.ErrCorruptMessage},
		{fmt.Errorf("read: %w", engine.ErrCorruptLog), wire.ErrStorage},
		{fmt.Errorf("append batch 0: %w: bad record", engine.ErrInvalidBatch), wire.ErrCorruptMessage},
	}
	for _, tc := range cases {
		if got := codeFor(tc.err); got != tc.want {
			t.Errorf("codeFor(%v) = %s, want %s", tc.err, got.Name(), tc.want.Name())
		}
	}
}
