package bench

import (
	"errors"
	"net"
	"os"
	"testing"
)

func TestPIDListeningOnFindsThisProcess(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pid, err := PIDListeningOn(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if pid != os.Getpid() {
		t.Fatalf("pid %d, want %d", pid, os.Getpid())
	}
	ln.Close()
	if _, err := PIDListeningOn(ln.Addr().String()); !errors.Is(err, ErrNoListener) {
		t.Fatalf("closed listener: %v", err)
	}
	if _, err := PIDListeningOn("no-port"); err == nil {
		t.Fatal("accepted an address without a port")
	}
}

func TestListeningInodesParsesProcTable(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:24C8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0
   1: 0100007F:24C8 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 999 1 0000000000000000 20 4 30 10 -1
   2: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777 1 0000000000000000 100 0 0 10 0
garbage`
	got := listeningInodes(table, 9416)
	if len(got) != 1 || got[0] != "12345" {
		t.Fatalf("inodes %v, want only the listening 12345 on port 9416", got)
	}
}

func FuzzListeningInodes(f *testing.F) {
	f.Add("header\n   0: 0100007F:24C8 00000000:0000 0A 0:0 00:0 0 0 0 12345 1 0 100 0 0 10 0\n", uint16(9416))
	f.Add("", uint16(0))
	f.Add("x\n 0: :: :: 0A a b c d e f\n", uint16(1))
	f.Fuzz(func(t *testing.T, table string, port uint16) {
		for _, inode := range listeningInodes(table, port) {
			if inode == "" {
				t.Fatal("empty inode returned")
			}
		}
	})
}
