package measure

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/procfs"
)

// ClockTicks is the unit of utime and stime in /proc/<pid>/stat: `getconf
// CLK_TCK`, else 100 (USER_HZ is 100 on every common Linux build).
func ClockTicks() (hz float64, how string) {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if v, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && v > 0 {
			return float64(v), "getconf CLK_TCK"
		}
	}
	return 100, "assumed"
}

// Proc is a process whose CPU time is accounted per run. PID 0 is this process.
type Proc struct {
	Name string
	PID  int
}

func open(pid int) (procfs.Proc, error) {
	if pid == 0 {
		return procfs.Self()
	}
	return procfs.NewProc(pid)
}

// CPUTicks returns utime+stime of pid (0: this process) in clock ticks.
func CPUTicks(pid int) (int64, error) {
	p, err := open(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return int64(st.UTime + st.STime), nil
}

// CPUSnap holds utime+stime per process name; -1 when unreadable.
type CPUSnap map[string]int64

// SnapCPU reads the CPU time of every process.
func SnapCPU(procs []Proc) CPUSnap {
	s := CPUSnap{}
	for _, p := range procs {
		if v, err := CPUTicks(p.PID); err == nil {
			s[p.Name] = v
		} else {
			s[p.Name] = -1
		}
	}
	return s
}

// Delta returns the CPU seconds each process used between a and b.
func (b CPUSnap) Delta(a CPUSnap, hz float64) map[string]float64 {
	d := map[string]float64{}
	for k, v := range b {
		if av, ok := a[k]; ok && av >= 0 && v >= 0 {
			d[k] = float64(v-av) / hz
		}
	}
	return d
}

// Kernel counts what a process has asked of the kernel so far: read and
// write system calls (/proc/<pid>/io syscr and syscw, all its threads) and
// context switches (voluntary and not, summed over its threads'
// /proc/<pid>/task/<tid>/status). A proxy pays them per request apart from
// the CPU time: a switch is a goroutine parked with no other to run.
type Kernel struct{ Reads, Writes, Switches uint64 }

// SnapKernel reads the kernel counts of every process; a process whose
// counts cannot be read is left out.
func SnapKernel(procs []Proc) map[string]Kernel {
	s := map[string]Kernel{}
	for _, p := range procs {
		if p.PID == 0 {
			continue // this process: its threads come and go with the load
		}
		proc, err := open(p.PID)
		if err != nil {
			continue
		}
		io, err := proc.IO()
		if err != nil {
			continue
		}
		k := Kernel{Reads: io.SyscR, Writes: io.SyscW}
		threads, err := procfs.AllThreads(p.PID)
		if err != nil {
			continue
		}
		for _, t := range threads {
			if st, err := t.NewStatus(); err == nil {
				k.Switches += st.VoluntaryCtxtSwitches + st.NonVoluntaryCtxtSwitches
			}
		}
		s[p.Name] = k
	}
	return s
}

// Memory returns VmRSS and VmHWM of pid in kB.
func Memory(pid int) (rssKB, hwmKB int64, err error) {
	p, err := open(pid)
	if err != nil {
		return 0, 0, err
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0, 0, err
	}
	return int64(st.VmRSS / 1024), int64(st.VmHWM / 1024), nil
}

// RSSKB returns VmRSS of pid in kB.
func RSSKB(pid int) (int64, error) {
	rss, _, err := Memory(pid)
	return rss, err
}

// RSSSampler samples VmRSS of a process every interval until stopped.
type RSSSampler struct {
	pid       int
	Before    int64 // kB, just before the start
	HWMBefore int64 // VmHWM before, kB
	Peak      int64 // kB
	HWMAfter  int64
	Samples   int
	stop      chan struct{}
	wg        sync.WaitGroup
}

// StartRSS starts sampling pid's VmRSS every interval.
func StartRSS(ctx context.Context, pid int, interval time.Duration) *RSSSampler {
	s := &RSSSampler{pid: pid, stop: make(chan struct{})}
	s.Before, s.HWMBefore, _ = Memory(pid)
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
				if v, err := RSSKB(pid); err == nil {
					s.Samples++
					s.Peak = max(s.Peak, v)
				}
			}
		}
	}()
	return s
}

// Stop ends sampling; Growth is then Peak - Before in kB.
func (s *RSSSampler) Stop() {
	close(s.stop)
	s.wg.Wait()
	if v, hwm, err := Memory(s.pid); err == nil {
		s.Peak = max(s.Peak, v)
		s.HWMAfter = hwm
	}
}

// Growth is the peak VmRSS minus the one before, kB.
func (s *RSSSampler) Growth() int64 { return s.Peak - s.Before }

// OpenFiles returns how many file descriptors pid has open and its soft
// RLIMIT_NOFILE (0: unlimited).
func OpenFiles(pid int) (n int, limit uint64, err error) {
	p, err := open(pid)
	if err != nil {
		return 0, 0, err
	}
	if n, err = p.FileDescriptorsLen(); err != nil {
		return 0, 0, err
	}
	l, err := p.Limits()
	if err != nil {
		return n, 0, err
	}
	return n, l.OpenFiles, nil
}

// Conn is one established TCP connection of a process, by its ports on
// 127.0.0.1 (or any address).
type Conn struct {
	LocalPort, RemotePort int
}

// tcpEstablished is the st column of /proc/net/tcp for ESTABLISHED.
const tcpEstablished = 1

// TCPConns returns the established TCP connections whose sockets pid holds
// (0: this process), from its /proc/<pid>/fd and /proc/net/tcp{,6}.
func TCPConns(pid int) ([]Conn, error) {
	p, err := open(pid)
	if err != nil {
		return nil, err
	}
	targets, err := p.FileDescriptorTargets()
	if err != nil {
		return nil, err
	}
	inodes := map[uint64]bool{}
	for _, t := range targets {
		if rest, ok := strings.CutPrefix(t, "socket:["); ok {
			if v, err := strconv.ParseUint(strings.TrimSuffix(rest, "]"), 10, 64); err == nil {
				inodes[v] = true
			}
		}
	}
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil, err
	}
	var out []Conn
	for _, read := range []func() (procfs.NetTCP, error){fs.NetTCP, fs.NetTCP6} {
		lines, err := read()
		if err != nil {
			return nil, fmt.Errorf("/proc/net/tcp: %w", err)
		}
		for _, l := range lines {
			if l.St == tcpEstablished && inodes[l.Inode] {
				out = append(out, Conn{LocalPort: int(l.LocalPort), RemotePort: int(l.RemPort)})
			}
		}
	}
	return out, nil
}

// CountConns counts the connections whose remote port is port (outbound to
// it) when remote, else whose local port is port (inbound).
func CountConns(conns []Conn, port int, remote bool) int {
	n := 0
	for _, c := range conns {
		if (remote && c.RemotePort == port) || (!remote && c.LocalPort == port) {
			n++
		}
	}
	return n
}
