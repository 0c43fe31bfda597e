package main

import (
	"fmt"
	"io"
	"runtime"

	"github.com/ringlog/ringlog/internal/buildinfo"
)

// Commit is the source revision the binary was built from, set at link time
// (-ldflags "-X main.Commit=..."; `make release` does) next to Version.
var Commit = "unknown"

// printVersion is --version's output: one line, name, version, commit, Go and platform.
func printVersion(w io.Writer) {
	fmt.Fprintf(w, "ringlogd %s (commit %s, %s, %s/%s)\n", Version, buildinfo.Commit(Commit), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
