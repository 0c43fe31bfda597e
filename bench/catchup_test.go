package bench

import (
	"context"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// countingMemDriver counts the consumers opened.
type countingMemDriver struct {
	*MemDriver
	consumers atomic.Int64
}

func (d *countingMemDriver) NewConsumer(ctx context.Context, topic string, partitions []int) (Consumer, error) {
	d.consumers.Add(1)
	return d.MemDriver.NewConsumer(ctx, topic, partitions)
}

// TestCatchUpRoundsAlternate: one backlog, read whole by fresh consumers each round, with
// the loopback measurement after the read in odd rounds and before it in even ones, over
// the read's length; each round's share is its own read over its own loopback.
func TestCatchUpRoundsAlternate(t *testing.T) {
	w := memWorkload()
	w.Topics, w.Consumers, w.BacklogSize = 1, 2, 1<<20
	driver := &countingMemDriver{MemDriver: NewMemDriver()}
	var seen []int64            // consumers opened when each loopback measurement started
	var windows []time.Duration // the windows asked for
	figures := []float64{100, 400, 200}
	loopback := func(_ context.Context, window time.Duration) (float64, error) {
		seen, windows = append(seen, driver.consumers.Load()), append(windows, window)
		return figures[len(seen)-1], nil
	}
	var afterFill []int64 // consumers opened when AfterFill ran
	report, err := CatchUpRounds(context.Background(), CatchUpOptions{Workload: w, Driver: driver, Rounds: 3, Loopback: loopback,
		AfterFill: func() error { afterFill = append(afterFill, driver.consumers.Load()); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(afterFill, []int64{0}) {
		t.Fatalf("AfterFill ran with %v consumers opened, want once before any", afterFill)
	}
	if want := []int64{2, 2, 6}; !slices.Equal(seen, want) {
		t.Fatalf("consumers opened at each loopback %v, want %v (read, loopback; loopback, read; read, loopback)", seen, want)
	}
	if b := report.Backlog; b.WrittenBytes < 1<<20 || b.WrittenMessages != b.WrittenBytes/int64(w.MessageSize) {
		t.Fatalf("backlog %+v", b)
	}
	var shares []float64
	for i, round := range report.Rounds {
		if round.ReadFirst != (i%2 == 0) || round.ReadSeconds <= 0 || round.LoopbackMBPerSec != figures[i] {
			t.Fatalf("round %d: %+v", i+1, round)
		}
		previous := round.ReadSeconds
		if !round.ReadFirst {
			previous = report.Rounds[i-1].ReadSeconds
		}
		if want := max(time.Duration(previous*float64(time.Second)), catchUpLoopbackMinimum); windows[i].Round(time.Microsecond) != want.Round(time.Microsecond) || round.LoopbackSeconds != windows[i].Seconds() {
			t.Fatalf("round %d: loopback window %v, want the read's %v", i+1, windows[i], want)
		}
		if got, want := round.ReadMBPerSec, float64(report.Backlog.WrittenBytes)/round.ReadSeconds/1e6; got != want {
			t.Fatalf("round %d: read %v MB/s, want %v", i+1, got, want)
		}
		if round.Share != round.ReadMBPerSec/figures[i] || round.BrokerDiskReadBytes < 0 {
			t.Fatalf("round %d: %+v", i+1, round)
		}
		shares = append(shares, round.Share)
	}
	if report.MedianShare != Median(shares) || report.MedianLoopbackMBPerSec != 200 {
		t.Fatalf("medians %+v of shares %v", report, shares)
	}
	if report.Driver.Name != "mem" || report.Driver.BrokerPID != 0 {
		t.Fatalf("driver %+v", report.Driver)
	}
	path := t.TempDir() + "/report.json"
	if err := report.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(path); err != nil || len(data) < 100 {
		t.Fatalf("report file: %d bytes, %v", len(data), err)
	}
}

func TestCatchUpRoundsRefusesNoBacklog(t *testing.T) {
	w := memWorkload()
	if _, err := CatchUpRounds(context.Background(), CatchUpOptions{Workload: w, Driver: NewMemDriver(), Rounds: 2}); err == nil {
		t.Fatal("a workload without a backlog was accepted")
	}
	w.BacklogSize = 1 << 20
	if _, err := CatchUpRounds(context.Background(), CatchUpOptions{Workload: w, Driver: NewMemDriver()}); err == nil {
		t.Fatal("zero rounds accepted")
	}
}

func TestReadDiskReadBytes(t *testing.T) {
	if n, err := ReadDiskReadBytes(os.Getpid()); err != nil || n < 0 {
		t.Fatalf("read_bytes of this process: %d, %v", n, err)
	}
	if _, err := ReadDiskReadBytes(-1); err == nil {
		t.Fatal("no error for pid -1")
	}
}
