// Package buildinfo owns what a ringlog binary says about the source it was built from:
// the commit `make release` links in, or else the one the Go toolchain stamped.
package buildinfo

import (
	"runtime/debug"
	"strings"
)

// Commit is linked, the commit set at link time (-ldflags "-X main.Commit=..."), when it
// is set; else the revision `go build` stamped from the checkout (12 hex digits, "-dirty"
// when the tree had changes); else "unknown" (a build outside a repository, a test binary).
func Commit(linked string) string {
	info, _ := debug.ReadBuildInfo()
	var settings []debug.BuildSetting
	if info != nil {
		settings = info.Settings
	}
	return commitFrom(linked, settings)
}

func commitFrom(linked string, settings []debug.BuildSetting) string {
	if linked != "" && linked != "unknown" {
		return linked
	}
	var rev string
	var dirty bool
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	rev = rev[:min(len(rev), 12)]
	if dirty {
		rev += "-dirty"
	}
	return strings.ToLower(rev)
}
