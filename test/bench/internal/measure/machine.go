package measure

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"github.com/prometheus/procfs"
)

// Machine describes where a report was measured.
type Machine struct {
	Commit string // HEAD and the number of changed files in the working tree
	NProc  int
	CPU    string
	Kernel string
	Go     string
	MemGB  float64
}

// ThisMachine reads the machine's description.
func ThisMachine() Machine {
	m := Machine{NProc: runtime.NumCPU(), Go: runtime.Version()}
	if out, err := exec.Command("nproc").Output(); err == nil {
		fmt.Sscanf(strings.TrimSpace(string(out)), "%d", &m.NProc)
	}
	if fs, err := procfs.NewDefaultFS(); err == nil {
		if cpus, err := fs.CPUInfo(); err == nil && len(cpus) > 0 {
			m.CPU = cpus[0].ModelName
		}
		if mi, err := fs.Meminfo(); err == nil && mi.MemTotal != nil {
			m.MemGB = float64(*mi.MemTotal) / (1 << 20)
		}
	}
	if out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil {
			if n := len(strings.Fields(strings.TrimSpace(string(st)))) / 2; n > 0 {
				m.Commit += fmt.Sprintf(" + %d modified tracked files", n)
			}
		}
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(data))
	}
	return m
}

// String is the report's one-line description.
func (m Machine) String() string {
	return fmt.Sprintf("%d CPUs (%s), %.0f GiB RAM, Linux %s, %s", m.NProc, m.CPU, m.MemGB, m.Kernel, m.Go)
}
