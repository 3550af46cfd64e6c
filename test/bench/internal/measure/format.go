package measure

import (
	"fmt"
	"time"
)

// Dur formats a duration with three significant figures or so.
func Dur(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < 0:
		return "−" + Dur(-d)
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
}

// Sec formats seconds as Dur does.
func Sec(s float64) string { return Dur(time.Duration(s * 1e9)) }

// US formats seconds in whole microseconds.
func US(s float64) string { return fmt.Sprintf("%.0f µs", s*1e6) }

// X formats a ratio.
func X(x float64) string { return fmt.Sprintf("×%.2f", x) }

// MB formats kB as MiB.
func MB(kb float64) string { return fmt.Sprintf("%.1f MiB", kb/1024) }

// KiB formats bytes as KiB.
func KiB(b float64) string { return fmt.Sprintf("%.1f KiB", b/1024) }
