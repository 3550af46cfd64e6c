package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clockTicks is the unit of utime and stime in /proc/<pid>/stat: `getconf
// CLK_TCK`, else 100 (USER_HZ is 100 on every common Linux build).
var clockTicks = func() (hz float64, how string) {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if v, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && v > 0 {
			return float64(v), "getconf CLK_TCK"
		}
	}
	return 100, "assumed"
}

// cpuTicks returns utime+stime of pid ("self" for this process).
func cpuTicks(pid string) (int64, error) {
	data, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%s/stat: no comm", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%s/stat: short", pid)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%s/stat: bad utime/stime", pid)
	}
	return u + st, nil
}

// statusKB returns a "kB" field of /proc/<pid>/status (VmRSS, VmHWM).
func statusKB(pid, field string) (int64, error) {
	data, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			return strconv.ParseInt(f[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%s/status: no %s", pid, field)
}

// proc is a process whose CPU time is accounted per run.
type proc struct {
	Name string
	PID  string
}

// cpuSnap holds utime+stime per process.
type cpuSnap map[string]int64

func snapCPU(procs []proc) cpuSnap {
	s := cpuSnap{}
	for _, p := range procs {
		if v, err := cpuTicks(p.PID); err == nil {
			s[p.Name] = v
		} else {
			s[p.Name] = -1
		}
	}
	return s
}

// delta returns the CPU seconds each process used between a and b.
func (b cpuSnap) delta(a cpuSnap, hz float64) map[string]float64 {
	d := map[string]float64{}
	for k, v := range b {
		if av, ok := a[k]; ok && av >= 0 && v >= 0 {
			d[k] = float64(v-av) / hz
		}
	}
	return d
}

// rssSampler samples VmRSS of pid every interval until stopped.
type rssSampler struct {
	pid       string
	Before    int64 // kB, just before the start
	HWMBefore int64 // VmHWM before, kB
	Peak      int64 // kB
	HWMAfter  int64
	Samples   int
	stop      chan struct{}
	wg        sync.WaitGroup
}

func startRSS(ctx context.Context, pid string, interval time.Duration) *rssSampler {
	s := &rssSampler{pid: pid, stop: make(chan struct{})}
	s.Before, _ = statusKB(pid, "VmRSS")
	s.HWMBefore, _ = statusKB(pid, "VmHWM")
	s.Peak = s.Before
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		tk := time.NewTicker(interval)
		defer tk.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-ctx.Done():
				return
			case <-tk.C:
				if v, err := statusKB(pid, "VmRSS"); err == nil {
					s.Samples++
					if v > s.Peak {
						s.Peak = v
					}
				}
			}
		}
	}()
	return s
}

// Stop ends sampling; Growth is then Peak - Before in kB.
func (s *rssSampler) Stop() {
	close(s.stop)
	s.wg.Wait()
	if v, err := statusKB(s.pid, "VmRSS"); err == nil && v > s.Peak {
		s.Peak = v
	}
	s.HWMAfter, _ = statusKB(s.pid, "VmHWM")
}

func (s *rssSampler) Growth() int64 { return s.Peak - s.Before }
