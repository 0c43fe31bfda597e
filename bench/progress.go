package bench

import (
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// ProgressLine rewrites one status line in place on a terminal. When the output is not a
// terminal (a CI log, a pipe) it prints nothing, so logs carry only the results.
type ProgressLine struct {
	mu       sync.Mutex // guards out and shown; Printf may be called from a ticker goroutine
	out      io.Writer
	terminal bool
	shown    bool
}

// NewProgressLine writes to out, or to nothing if out is not a terminal.
func NewProgressLine(out io.Writer) *ProgressLine {
	p := &ProgressLine{out: out}
	if f, ok := out.(*os.File); ok {
		_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
		p.terminal = err == nil
	}
	return p
}

// Printf replaces the status line.
func (p *ProgressLine) Printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.terminal {
		return
	}
	fmt.Fprintf(p.out, "\r\033[K"+format, args...)
	p.shown = true
}

// Done clears the status line.
func (p *ProgressLine) Done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.out, "\r\033[K")
		p.shown = false
	}
}
