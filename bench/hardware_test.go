package bench

import (
	"strings"
	"testing"
)

func TestDetectHardwareOnThisMachine(t *testing.T) {
	h := DetectHardware(t.TempDir())
	if h.Cores < 1 || h.MemoryBytes <= 0 || h.Kernel == "" || h.CPUModel == "" || h.GoVersion == "" {
		t.Fatalf("incomplete hardware: %+v", h)
	}
	if h.Disk.Filesystem == "" {
		t.Fatalf("no filesystem for the temp dir: %+v", h.Disk)
	}
	line := h.String()
	for _, want := range []string{h.CPUModel, h.Kernel, h.Disk.Filesystem, "load"} {
		if !strings.Contains(line, want) {
			t.Errorf("hardware line %q lacks %q", line, want)
		}
	}
}

func TestReadRSSOfThisProcess(t *testing.T) {
	rss, err := ReadRSS(1)
	if err != nil || rss <= 0 {
		t.Fatalf("rss of pid 1: %d %v", rss, err)
	}
	if _, err := ReadRSS(-5); err == nil {
		t.Fatal("read rss of a pid that cannot exist")
	}
}
