package measure

import "testing"

func TestPprofTotal(t *testing.T) {
	for _, tt := range []struct {
		top  string
		want float64
	}{
		{"Showing nodes accounting for 566.64MB, 93.92% of 603.30MB total\n", 603.30 * (1 << 20)},
		{"Showing nodes accounting for 1GB, 50% of 2GB total\nDropped 3 nodes", 2 << 30},
		{"Showing nodes accounting for 12kB, 100% of 12kB total", 12 << 10},
		{"Showing nodes accounting for 17B, 100% of 17B total", 17},
		{"no header", 0},
		{"Showing nodes accounting for 1, 100% of 1 total", 0}, // no unit: not bytes
	} {
		if got := PprofTotal(tt.top); got != tt.want {
			t.Errorf("PprofTotal(%q) = %v, want %v", tt.top, got, tt.want)
		}
	}
}
