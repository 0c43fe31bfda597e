package node

import (
	"net"
	"testing"
)

func TestAdvertisedAddr(t *testing.T) {
	for _, tc := range []struct {
		listen, host, want string
	}{
		{"127.0.0.1:9400", "", "127.0.0.1:9400"},
		{"0.0.0.0:9400", "broker1.example", "broker1.example:9400"},
		{"[::]:41234", "10.0.0.5", "10.0.0.5:41234"},
		{"0.0.0.0:9400", "fe80::1", "[fe80::1]:9400"},
	} {
		addr, err := net.ResolveTCPAddr("tcp", tc.listen)
		if err != nil {
			t.Fatal(err)
		}
		if got := advertisedAddr(addr, tc.host); got != tc.want {
			t.Errorf("advertisedAddr(%s, %q) = %s, want %s", tc.listen, tc.host, got, tc.want)
		}
	}
}

func TestUnspecifiedHost(t *testing.T) {
	for listen, want := range map[string]bool{"0.0.0.0:1": true, "[::]:1": true, "127.0.0.1:1": false, "10.1.2.3:1": false} {
		addr, err := net.ResolveTCPAddr("tcp", listen)
		if err != nil {
			t.Fatal(err)
		}
		if got := unspecifiedHost(addr); got != want {
			t.Errorf("unspecifiedHost(%s) = %v, want %v", listen, got, want)
		}
	}
}
