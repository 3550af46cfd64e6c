package harness

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// netns is a network namespace the harness created, with only its loopback up:
// a process in it cannot be dialed from the host, nor dial out, except
// through the relays the harness opens.
type netns struct {
	name string
	ip   string // the ip command
	path string

	mu        sync.Mutex
	listeners []net.Listener
}

// newNetns creates network namespace name (ip netns add; needs root).
func newNetns(ctx context.Context, name string) (*netns, error) {
	ip, err := lookPath("ip")
	if err != nil {
		return nil, fmt.Errorf("a network namespace needs the ip command: %v", err)
	}
	for _, args := range [][]string{{"netns", "add", name}, {"-n", name, "link", "set", "lo", "up"}} {
		if out, err := exec.CommandContext(ctx, ip, args...).CombinedOutput(); err != nil {
			if args[0] != "netns" {
				_ = exec.Command(ip, "netns", "delete", name).Run()
			}
			return nil, fmt.Errorf("ip %v: %v: %s", args, err, out)
		}
	}
	return &netns{name: name, ip: ip, path: filepath.Join("/var/run/netns", name)}, nil
}

// do runs fn on a thread that entered the namespace: the sockets fn creates
// live in it, and keep working from any thread. The thread returns to the
// host's namespace after; were it discarded instead, the processes it started
// would get their parent-death signal.
func (n *netns) do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		host, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer host.Close()
		f, err := os.Open(n.path)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("entering network namespace %s: %v", n.name, err)
			return
		}
		err = fn()
		if unix.Setns(int(host.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread() // else the thread stays locked and exits with this goroutine
		}
		errc <- err
	}()
	return <-errc
}

// relayIn listens on 127.0.0.1:port inside the namespace and relays every
// connection to target, dialed from the host's network.
func (n *netns) relayIn(port int, target string) error {
	var l net.Listener
	if err := n.do(func() (err error) {
		l, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		return err
	}); err != nil {
		return err
	}
	n.mu.Lock()
	n.listeners = append(n.listeners, l)
	n.mu.Unlock()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				pipe(c, up)
			}()
		}
	}()
	return nil
}

// dial opens a connection to address inside the namespace.
func (n *netns) dial(ctx context.Context, address string) (c net.Conn, err error) {
	err = n.do(func() error {
		c, err = (&net.Dialer{}).DialContext(ctx, "tcp", address)
		return err
	})
	return c, err
}

// delete closes the relays and removes the namespace.
func (n *netns) delete() error {
	n.mu.Lock()
	for _, l := range n.listeners {
		l.Close()
	}
	n.listeners = nil
	n.mu.Unlock()
	out, err := exec.Command(n.ip, "netns", "delete", n.name).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip netns delete %s: %v: %s", n.name, err, out)
	}
	return nil
}

// pipe copies both ways until either side ends.
func pipe(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
}

// lookPath finds an administration command, also in the sbin directories a
// user's PATH may lack.
func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		if p := filepath.Join(dir, name); isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found: a network namespace needs it", name)
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
