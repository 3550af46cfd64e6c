// Package measure holds what the benchmark programs share: the ways to reach
// member-b (direct, gateway alone, hub + gateway) with their clients and load
// generators, readings of /proc (CPU time, RSS, open files, TCP connections),
// scrapes of a Prometheus /metrics endpoint, and the statistics and number
// formats of their reports. test/bench (make bench) and test/bench/scale (make
// bench-scale) use it.
package measure

import (
	"fmt"
	"os"
	"time"
)

// Logger prints timestamped progress lines to stderr under its name.
type Logger string

// Printf prints one progress line.
func (l Logger) Printf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%s %s] %s\n", string(l), time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
