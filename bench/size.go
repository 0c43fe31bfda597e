package bench

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ErrBadSize is returned for a byte size that cannot be parsed.
var ErrBadSize = errors.New("bad byte size")

// sizeUnits maps a suffix to its multiplier. Binary (KiB) and decimal (KB) units both parse;
// a bare number is bytes.
var sizeUnits = []struct {
	suffix string
	bytes  float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40},
	{"B", 1},
}

// ParseBytes parses "4GiB", "512MiB", "1.5GB", "4096" into bytes. It rejects negative,
// fractional-byte and overflowing values.
func ParseBytes(s string) (int64, error) {
	text := strings.TrimSpace(s)
	multiplier := 1.0
	for _, unit := range sizeUnits {
		if rest, ok := strings.CutSuffix(text, unit.suffix); ok {
			text, multiplier = strings.TrimSpace(rest), unit.bytes
			break
		}
	}
	value, err := strconv.ParseFloat(text, 64)
	if err != nil || math.IsNaN(value) || math.IsInf(value, 0) {
		return 0, fmt.Errorf("%w: %q", ErrBadSize, s)
	}
	total := value * multiplier
	if total < 0 || total > math.MaxInt64/2 {
		return 0, fmt.Errorf("%w: %q out of range", ErrBadSize, s)
	}
	if total != math.Trunc(total) {
		return 0, fmt.Errorf("%w: %q is not a whole number of bytes", ErrBadSize, s)
	}
	return int64(total), nil
}

// FormatBytes renders n with the largest binary unit that keeps it at least 1.
func FormatBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	value := float64(n)
	index := 0
	for value >= 1024 && index < len(units)-1 {
		value /= 1024
		index++
	}
	if value == math.Trunc(value) {
		return fmt.Sprintf("%d%s", int64(value), units[index])
	}
	return fmt.Sprintf("%.1f%s", value, units[index])
}
