package measure

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"time"
)

// Pprof runs `go tool pprof args... [bin] file` and returns its output, or
// the command and its error in place of it.
func Pprof(ctx context.Context, bin, file string, args ...string) string {
	all := append([]string{"tool", "pprof"}, args...)
	if bin != "" {
		all = append(all, bin)
	}
	all = append(all, file)
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(cctx, "go", all...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("go %s: %v\n%s", strings.Join(all, " "), err, out)
	}
	return string(out)
}

// PprofTotal reads N of "Showing nodes accounting for X, P% of N total" as
// bytes (pprof writes 1.5GB, 603.30MB, 12kB, 17B).
func PprofTotal(top string) float64 {
	i := strings.Index(top, " total")
	j := strings.LastIndex(top[:max(i, 0)], " of ")
	if i < 0 || j < 0 {
		return 0
	}
	v := top[j+len(" of ") : i]
	units := []struct {
		suffix string
		scale  float64
	}{{"TB", 1 << 40}, {"GB", 1 << 30}, {"MB", 1 << 20}, {"kB", 1 << 10}, {"B", 1}}
	for _, u := range units {
		if strings.HasSuffix(v, u.suffix) {
			var f float64
			if _, err := fmt.Sscanf(strings.TrimSuffix(v, u.suffix), "%g", &f); err != nil {
				return 0
			}
			return f * u.scale
		}
	}
	return 0
}

// TrimPprof drops pprof's header lines (file, build id, time, type) but
// keeps the totals and the table.
func TrimPprof(s string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "File:") || strings.HasPrefix(line, "Build ID:") || strings.HasPrefix(line, "Time:") || strings.HasPrefix(line, "Type:") {
			continue
		}
		out = append(out, line)
	}
	return strings.TrimLeft(strings.Join(out, "\n"), "\n")
}

// ForceGC makes a Go server collect garbage twice through its net/http/pprof
// handlers (GET root/debug/pprof/heap?gc=1 with client and header): the first
// collection only moves sync.Pool contents to the pools' victim caches, the
// second frees them. After it the server's heap profile is current too: the
// runtime publishes allocations to the profile one collection late, so without
// it a profile taken now still misses (and a delta profile started now then
// counts) what was allocated just before.
func ForceGC(ctx context.Context, client *http.Client, header http.Header, root string) error {
	for range 2 {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, root+"/debug/pprof/heap?gc=1", nil)
		if err != nil {
			return err
		}
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /debug/pprof/heap?gc=1: %s", resp.Status)
		}
	}
	return nil
}
