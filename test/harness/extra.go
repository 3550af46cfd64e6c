package harness

import (
	"context"
	"time"
)

// ExtraProcess is a process a test runs in the environment besides those Start
// starts, for example an etcd and a kube-gateway taken from a rendered chart.
type ExtraProcess struct {
	// Name names the process and its log, <WorkDir>/logs/<Name>.log.
	Name string
	// Args returns the full argv (Args()[0] an absolute path). It is called
	// again, to pick other ports, when the process exits because a port was
	// taken.
	Args func() []string
	// Env is added to the harness's own environment.
	Env []string
	// Ready is polled every 250 ms until it returns nil; the process must not
	// exit before. Nil: started is ready.
	Ready func(ctx context.Context) error
	// Timeout bounds the wait for Ready (default 2 minutes).
	Timeout time.Duration
}

// StartExtra starts x and waits until it is ready. Env.Stop stops it with the
// others, by its PID; Process.Stop stops it earlier.
func (e *Env) StartExtra(ctx context.Context, x ExtraProcess) (*Process, error) {
	p := e.newProcess(x.Name)
	p.Env = x.Env
	p.Args = x.Args()
	p.probe = x.Ready
	p.timeout = x.Timeout
	return p, e.startTracked(ctx, p, func() { p.Args = x.Args() })
}

// FreePort returns a loopback TCP port that was free a moment ago and that
// the harness has handed out to nobody else.
func FreePort() (int, error) { return freePort() }
