package bench

import (
	"errors"
	"testing"
)

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"4096", 4096}, {"4KiB", 4096}, {"4GiB", 4 << 30}, {"1.5GiB", 3 << 29}, {"2 MiB", 2 << 20},
		{"1GB", 1e9}, {"100B", 100}, {"64K", 64 << 10}, {"0", 0},
	} {
		got, err := ParseBytes(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "GiB", "-1MiB", "1.5B", "NaN", "Inf", "1e30TiB", "4 gigs", "0x10"} {
		if _, err := ParseBytes(bad); !errors.Is(err, ErrBadSize) {
			t.Errorf("ParseBytes(%q) error %v, want ErrBadSize", bad, err)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for in, want := range map[int64]string{0: "0B", 1023: "1023B", 4096: "4KiB", 1 << 20: "1MiB", 3 << 29: "1.5GiB"} {
		if got := FormatBytes(in); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", in, got, want)
		}
	}
}

func FuzzParseBytes(f *testing.F) {
	for _, seed := range []string{"4GiB", "1.5MB", "", "-1", "9999999999999TiB", "1e3KiB"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseBytes(s)
		if err != nil {
			if !errors.Is(err, ErrBadSize) {
				t.Fatalf("error %v is not ErrBadSize", err)
			}
			return
		}
		if n < 0 {
			t.Fatalf("ParseBytes(%q) = %d", s, n)
		}
	})
}
