package harness

import (
	"bufio"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// LoadBalancer is HAProxy on loopback in TCP mode in front of gateway
// replicas, standing in for the Service of the chart's Deployment: TLS passes
// through to the replicas (the hub verifies their serving certificate), each
// new connection goes to the next replica whose readiness check passes, and
// connections already open stay where they are, as with kube-proxy. HAProxy
// comes from the distribution's packages (make test-deps).
type LoadBalancer struct {
	Process *Process
	// URL is https://127.0.0.1:Port.
	URL  string
	Port int
	// socket is HAProxy's stats socket, where Server reads a replica's state.
	socket string
}

// LoadBalancerConfig says what HAProxy balances and how it checks readiness.
type LoadBalancerConfig struct {
	// Backends maps a server name to a replica's https URL.
	Backends map[string]string
	// ReadyPath is the readiness probe's path (with its query), sent as a
	// GET over TLS without verifying the certificate, as the kubelet does.
	ReadyPath string
	// Interval between checks; Fall failed checks take a server out, Rise
	// passed ones put it back. Zero: 1 s, 1 and 1.
	Interval   time.Duration
	Fall, Rise int
}

// StartLoadBalancer starts HAProxy on a free loopback port before cfg's
// backends and waits until it accepts connections (not until the backends
// are up: see WaitServer).
func (e *Env) StartLoadBalancer(ctx context.Context, name string, cfg LoadBalancerConfig) (*LoadBalancer, error) {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/haproxy"); serr != nil {
			return nil, fmt.Errorf("haproxy is needed: install the haproxy package (make test-deps): %w", err)
		}
		bin = "/usr/sbin/haproxy"
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	cfg.Fall, cfg.Rise = max(cfg.Fall, 1), max(cfg.Rise, 1)
	dir := filepath.Join(e.WorkDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	lb := &LoadBalancer{socket: filepath.Join(dir, "stats.sock")}
	confPath := filepath.Join(dir, "haproxy.cfg")
	var confErr error
	args := func() []string {
		port, err := freePort()
		if err != nil {
			confErr = err
			return []string{"/bin/false"}
		}
		lb.Port, lb.URL = port, "https://127.0.0.1:"+strconv.Itoa(port)
		conf, err := haproxyConfig(cfg, port, lb.socket)
		if err == nil {
			err = os.WriteFile(confPath, []byte(conf), 0o600)
		}
		confErr = err
		// -db: foreground, logs on stdout; -W: master-worker, so that the
		// PID the harness stops is the one that ends the workers.
		return []string{bin, "-db", "-W", "-f", confPath}
	}
	p, err := e.StartExtra(ctx, ExtraProcess{
		Name: name,
		Args: args,
		Ready: func(ctx context.Context) error {
			var d net.Dialer
			c, err := d.DialContext(ctx, "unix", lb.socket)
			if err != nil {
				return err
			}
			return c.Close()
		},
		Timeout: 30 * time.Second,
	})
	lb.Process = p
	if confErr != nil {
		return lb, confErr
	}
	return lb, err
}

func haproxyConfig(cfg LoadBalancerConfig, port int, socket string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, `global
	stats socket %s mode 600 level admin
	log stdout format raw local0 info
defaults
	mode tcp
	log global
	option tcplog
	timeout connect 2s
	timeout client 10m
	timeout server 10m
	timeout check 2s
	# A connection refused is the client's, as behind kube-proxy: no retry
	# on another replica that would hide it.
	retries 0
frontend gateway
	bind 127.0.0.1:%d
	default_backend replicas
backend replicas
	balance roundrobin
	option httpchk
	http-check send meth GET uri %s ver HTTP/1.1 hdr Host localhost
	http-check expect status 200
	default-server check check-ssl verify none inter %dms fall %d rise %d
`, socket, port, cfg.ReadyPath, cfg.Interval.Milliseconds(), cfg.Fall, cfg.Rise)
	for _, n := range sortedKeys(cfg.Backends) {
		u, err := url.Parse(cfg.Backends[n])
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "\tserver %s %s\n", n, u.Host)
	}
	return b.String(), nil
}

// ServerState is what HAProxy's stats say of one backend server.
type ServerState struct {
	// Status: UP, DOWN, or a transition such as "UP 1/2" (going down) or
	// "DOWN 1/2" (coming up).
	Status string
	// Sessions is the number of connections open to it now, Total the
	// number it was given since HAProxy started.
	Sessions, Total int
}

// Server reads the state of backend server name from HAProxy's stats socket.
func (lb *LoadBalancer) Server(ctx context.Context, name string) (ServerState, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", lb.socket)
	if err != nil {
		return ServerState{}, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := io.WriteString(c, "show stat\n"); err != nil {
		return ServerState{}, err
	}
	r := csv.NewReader(bufio.NewReader(c))
	r.FieldsPerRecord = -1
	header, err := r.Read()
	if err != nil {
		return ServerState{}, fmt.Errorf("show stat: %w", err)
	}
	col := map[string]int{}
	for i, h := range header {
		col[strings.TrimPrefix(h, "# ")] = i
	}
	for {
		rec, err := r.Read()
		if err == io.EOF {
			return ServerState{}, fmt.Errorf("HAProxy has no server %q", name)
		}
		if err != nil {
			return ServerState{}, fmt.Errorf("show stat: %w", err)
		}
		if len(rec) <= col["status"] || rec[col["pxname"]] != "replicas" || rec[col["svname"]] != name {
			continue
		}
		scur, _ := strconv.Atoi(rec[col["scur"]])
		stot, _ := strconv.Atoi(rec[col["stot"]])
		return ServerState{Status: rec[col["status"]], Sessions: scur, Total: stot}, nil
	}
}

// WaitServer polls until backend server name is fully up (up) or fully down
// (!up), or timeout passes.
func (lb *LoadBalancer) WaitServer(ctx context.Context, name string, up bool, timeout time.Duration) error {
	want := "DOWN"
	if up {
		want = "UP"
	}
	var last ServerState
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		last, lastErr = lb.Server(ctx, name)
		return lastErr == nil && last.Status == want, nil
	})
	if err != nil {
		return fmt.Errorf("HAProxy server %s not %s within %s (status %q, error %v)", name, want, timeout, last.Status, lastErr)
	}
	return nil
}

// RouteAPIServiceTo points the hub's APIService for the gateway at port on
// loopback (the port of the ExternalName Service and of the APIService) and
// waits until it is Available; the returned function points it back at the
// environment's gateway. The Service keeps its name, so the serving
// certificate still matches.
func (e *Env) RouteAPIServiceTo(ctx context.Context, port int) (restore func(context.Context) error, err error) {
	if err := e.setAPIServicePort(ctx, port); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return e.setAPIServicePort(ctx, portOf(e.GatewayURL)) }, nil
}

func (e *Env) setAPIServicePort(ctx context.Context, port int) error {
	cs, dyn, err := e.hubClients()
	if err != nil {
		return err
	}
	svcPatch := fmt.Appendf(nil, `{"spec":{"ports":[{"name":"https","protocol":"TCP","port":%d}]}}`, port)
	if _, err := cs.CoreV1().Services(GatewayNamespace).Patch(ctx, GatewayService, types.MergePatchType, svcPatch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("service %s/%s: %w", GatewayNamespace, GatewayService, err)
	}
	apiPatch := fmt.Appendf(nil, `{"spec":{"service":{"port":%d}}}`, port)
	if _, err := dyn.Resource(apiServiceGVR).Patch(ctx, APIServiceName, types.MergePatchType, apiPatch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("apiservice %s: %w", APIServiceName, err)
	}
	state := "not read yet"
	return poll(ctx, apiServiceTimeout, func(ctx context.Context) (bool, error) {
		obj, err := dyn.Resource(apiServiceGVR).Get(ctx, APIServiceName, metav1.GetOptions{})
		if err != nil {
			state = err.Error()
			return false, nil
		}
		for _, c := range conditions(obj.Object) {
			if c["type"] == "Available" {
				state = fmt.Sprintf("Available=%v reason=%v message=%v", c["status"], c["reason"], c["message"])
				return c["status"] == "True", nil
			}
		}
		state = "no Available condition"
		return false, nil
	}, func() string { return "APIService " + APIServiceName + " on port " + strconv.Itoa(port) + ": " + state })
}

func conditions(obj map[string]any) []map[string]any {
	status, _ := obj["status"].(map[string]any)
	list, _ := status["conditions"].([]any)
	var out []map[string]any
	for _, c := range list {
		if m, ok := c.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}
