package main

import (
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/ringlog/ringlog/internal/buildinfo"
)

// Version and Commit identify the build, set at link time by `make release`
// (-ldflags "-X main.Version=... -X main.Commit=...").
var (
	Version = "0.1.0-dev"
	Commit  = "unknown"
)

func init() {
	register("version", "print the version and commit of this ringlog", func(args []string) error {
		if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprintln(usageOutput, "usage: ringlog version    (also ringlog --version)")
			return nil
		}
		if len(args) > 0 {
			return fmt.Errorf("unexpected argument %q", args[0])
		}
		printVersion(os.Stdout)
		return nil
	})
}

func printVersion(w io.Writer) {
	fmt.Fprintf(w, "ringlog %s (commit %s, %s, %s/%s)\n", Version, buildinfo.Commit(Commit), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
