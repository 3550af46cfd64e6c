package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// Konnectivity is one or more konnectivity servers (proxy-server, gRPC mode,
// mutual TLS) next to the gateway and a proxy-agent for one member that dials
// out to them, with an UpstreamCluster that reaches the member through them.
// With several servers, each runs with --server-count, and the agent dials
// them through a balancer that stands in for their Service: it syncs until
// it is connected to each of them.
//
// As root, the agent runs in a network namespace of its own (Isolated): it
// reaches the konnectivity servers and the member's apiservers only through
// relays the harness listens with on that namespace's loopback, and the
// cluster's endpoints, https://localhost:<port>, are ports only that
// namespace has: the gateway cannot dial them, only the agent can.
type Konnectivity struct {
	// Servers are the konnectivity servers; Agent the member's agent.
	Servers []*Process
	Agent   *Process
	// ServerAddresses are the servers' frontend gRPC addresses the gateway
	// dials, in the order of Servers.
	ServerAddresses []string
	// Cluster is the UpstreamCluster that goes through the tunnel.
	Cluster string
	// Endpoints are the cluster's spec.servers endpoints.
	Endpoints []string
	// Isolated says whether the agent runs in a network namespace of its own.
	Isolated bool

	serverMetrics, serverReady []string
	agentMetrics               string
	agentClient                *http.Client
	ns                         *netns
	balancer                   *balancer
}

// KonnectivityHost is the host of the tunnelled cluster's endpoints and the
// identifier its agent announces; the server routes with --proxy-strategies=destHost.
const KonnectivityHost = "localhost"

// Ports of the agent's own servers (inside its namespace when Isolated).
const agentAdminPort, agentHealthPort = 8094, 8093

// StartKonnectivity starts a konnectivity server and an agent for member, and
// registers member again as UpstreamCluster cluster through the tunnel (the
// member's credential Secret, and Secret <cluster>-konnectivity with the
// gateway's client certificate toward the konnectivity server), with
// kubeconfigs alice@<cluster> and admin@<cluster>. It returns once the cluster
// answers through the hub. Close stops the processes and removes the network
// namespace; the caller deletes the UpstreamCluster.
func (e *Env) StartKonnectivity(ctx context.Context, member, cluster string) (*Konnectivity, error) {
	return e.StartKonnectivityServers(ctx, member, cluster, 1)
}

// StartKonnectivityServers is StartKonnectivity with n konnectivity servers
// (--server-count=n), all named in the cluster's
// spec.clientConfig.konnectivity.addresses when n > 1. It returns once the
// agent is connected to each server and the cluster answers through the hub.
func (e *Env) StartKonnectivityServers(ctx context.Context, member, cluster string, n int) (_ *Konnectivity, err error) {
	if err := checkBinaries(e.BinDir, "proxy-server", "proxy-agent"); err != nil {
		return nil, err
	}
	dir := filepath.Join(e.WorkDir, "konnectivity")
	ca, err := newCA(dir, "konnectivity-ca")
	if err != nil {
		return nil, err
	}
	serving, err := ca.issue(dir, "proxy-server", loopbackServing())
	if err != nil {
		return nil, err
	}
	gatewayClient, err := ca.issue(dir, "kube-gateway", certSpec{CommonName: "kube-gateway"})
	if err != nil {
		return nil, err
	}
	agentClient, err := ca.issue(dir, "proxy-agent", certSpec{CommonName: "proxy-agent"})
	if err != nil {
		return nil, err
	}
	k := &Konnectivity{Cluster: cluster, agentClient: http.DefaultClient}
	defer func() {
		if err != nil {
			_ = k.Close()
		}
	}()
	if os.Geteuid() == 0 {
		if k.ns, err = newNetns(ctx, "kube-gateway-e2e-"+randomToken()[:8]); err != nil {
			return nil, err
		}
		k.Isolated = true
		k.agentClient = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return k.ns.dial(ctx, addr)
		}}}
	} else {
		e.logf("not root: the konnectivity agent shares the host's network")
	}

	var agentAddresses []string
	for i := range n {
		var agentPort int
		var serverHealth string
		k.ServerAddresses = append(k.ServerAddresses, "")
		k.serverMetrics = append(k.serverMetrics, "")
		k.serverReady = append(k.serverReady, "")
		name := "konnectivity-server"
		if n > 1 {
			name = fmt.Sprintf("konnectivity-server-%d", i)
		}
		p, err := e.StartExtra(ctx, ExtraProcess{
			Name: name,
			Args: func() []string {
				front, admin, health := mustFreePort(), mustFreePort(), mustFreePort()
				agentPort = mustFreePort()
				k.ServerAddresses[i] = fmt.Sprintf("127.0.0.1:%d", front)
				k.serverMetrics[i] = fmt.Sprintf("http://127.0.0.1:%d/metrics", admin)
				k.serverReady[i] = fmt.Sprintf("http://127.0.0.1:%d/readyz", health)
				serverHealth = fmt.Sprintf("http://127.0.0.1:%d/healthz", health)
				return []string{filepath.Join(e.BinDir, "proxy-server"), "--mode=grpc",
					"--server-bind-address=127.0.0.1", "--server-port=" + strconv.Itoa(front),
					"--server-cert=" + serving.CertFile, "--server-key=" + serving.KeyFile, "--server-ca-cert=" + ca.CertFile,
					"--agent-bind-address=127.0.0.1", "--agent-port=" + strconv.Itoa(agentPort),
					"--cluster-cert=" + serving.CertFile, "--cluster-key=" + serving.KeyFile, "--cluster-ca-cert=" + ca.CertFile,
					"--admin-bind-address=127.0.0.1", "--admin-port=" + strconv.Itoa(admin),
					"--health-bind-address=127.0.0.1", "--health-port=" + strconv.Itoa(health),
					// Only the agent that announces a dial's host gets it: never
					// another member's agent.
					"--proxy-strategies=destHost", "--server-count=" + strconv.Itoa(n), "--server-id=" + name}
			},
			Ready: func(ctx context.Context) error { return httpOK(ctx, http.DefaultClient, serverHealth) },
		})
		k.Servers = append(k.Servers, p)
		if err != nil {
			return nil, err
		}
		agentAddresses = append(agentAddresses, fmt.Sprintf("127.0.0.1:%d", agentPort))
	}
	agentAddress := agentAddresses[0]
	if n > 1 {
		if k.balancer, err = startBalancer(agentAddresses); err != nil {
			return nil, err
		}
		agentAddress = k.balancer.l.Addr().String()
	}

	// The agent's way to the servers, and to the member's apiservers: from
	// its namespace through relays, else directly.
	serverPort := portOf(agentAddress)
	if k.Isolated {
		serverPort = mustFreePort()
		if err := k.ns.relayIn(serverPort, agentAddress); err != nil {
			return nil, err
		}
	}
	for _, s := range e.Members[member].Servers {
		port := s.Port
		if k.Isolated {
			// Free on the host: a direct dial from the gateway is refused.
			port = mustFreePort()
			if err := k.ns.relayIn(port, fmt.Sprintf("127.0.0.1:%d", s.Port)); err != nil {
				return nil, err
			}
		}
		k.Endpoints = append(k.Endpoints, fmt.Sprintf("https://%s:%d", KonnectivityHost, port))
	}
	k.agentMetrics = fmt.Sprintf("http://127.0.0.1:%d/metrics", agentAdminPort)
	agentReady := fmt.Sprintf("http://127.0.0.1:%d/readyz", agentHealthPort)
	agentArgs := []string{filepath.Join(e.BinDir, "proxy-agent"), "--agent-id=" + member,
		"--proxy-server-host=127.0.0.1", "--proxy-server-port=" + strconv.Itoa(serverPort),
		"--ca-cert=" + ca.CertFile, "--agent-cert=" + agentClient.CertFile, "--agent-key=" + agentClient.KeyFile,
		"--agent-identifiers=host=" + KonnectivityHost,
		"--admin-server-port=" + strconv.Itoa(agentAdminPort), "--health-server-port=" + strconv.Itoa(agentHealthPort)}
	if k.Isolated {
		ip, err := lookPath("ip")
		if err != nil {
			return nil, err
		}
		agentArgs = append([]string{ip, "netns", "exec", k.ns.name}, agentArgs...)
	}
	k.Agent, err = e.StartExtra(ctx, ExtraProcess{
		Name:  "konnectivity-agent-" + member,
		Args:  func() []string { return agentArgs },
		Ready: func(ctx context.Context) error { return httpOK(ctx, k.agentClient, agentReady) },
	})
	if err != nil {
		return nil, err
	}
	for i := range k.Servers {
		if err := poll(ctx, proxyReadyTimeout, func(ctx context.Context) (bool, error) {
			return k.AgentConnected(ctx, i) == nil, nil
		}, func() string {
			return fmt.Sprintf("the agent connected to konnectivity server %s", k.ServerAddresses[i])
		}); err != nil {
			return nil, err
		}
	}

	cs, err := kubernetes.NewForConfig(e.Hub.AdminConfig)
	if err != nil {
		return nil, err
	}
	secretName := cluster + "-konnectivity"
	if err := ensure(ctx, "secret "+secretName, func(ctx context.Context) error {
		_, err := cs.CoreV1().Secrets(GatewayNamespace).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: GatewayNamespace},
			Data:       map[string][]byte{"tls.crt": gatewayClient.CertPEM, "tls.key": gatewayClient.KeyPEM, "ca.crt": ca.CertPEM},
		}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	var servers []any
	for _, ep := range k.Endpoints {
		servers = append(servers, map[string]any{"endpoint": ep})
	}
	tunnel := map[string]any{"secretRef": map[string]any{"namespace": GatewayNamespace, "name": secretName}}
	if n == 1 {
		tunnel["address"] = k.ServerAddresses[0]
	} else {
		tunnel["addresses"] = anySlice(k.ServerAddresses)
	}
	uc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": UpstreamClusterGVR.GroupVersion().String(),
		"kind":       "UpstreamCluster",
		"metadata":   map[string]any{"name": cluster},
		"spec": map[string]any{
			"servers": servers,
			"clientConfig": map[string]any{
				"secretRef":    map[string]any{"namespace": GatewayNamespace, "name": member},
				"konnectivity": tunnel,
			},
		},
	}}
	dyn, err := dynamic.NewForConfig(e.Hub.AdminConfig)
	if err != nil {
		return nil, err
	}
	if err := ensure(ctx, "upstreamcluster "+cluster, func(ctx context.Context) error {
		_, err := dyn.Resource(UpstreamClusterGVR).Create(ctx, uc, metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	for _, u := range []string{UserAlice, UserAdmin} {
		n := entry(u+"@"+cluster, u, "gateway-"+cluster)
		if err := writeKubeconfig(e.Kubeconfig(u+"@"+cluster), n, e.Hub.Servers[0].URL+ProxyPath(cluster), e.Hub.CAData, e.Hub.Tokens[u]); err != nil {
			return nil, err
		}
	}
	return k, waitProxied(ctx, cs, cluster, nil, nil)
}

// ServerMetric and AgentMetric return the sum of the samples of a Prometheus
// counter or gauge (every label set) of the konnectivity server (the first,
// or the i-th of ServerMetricOf) or agent, 0 when absent.
func (k *Konnectivity) ServerMetric(ctx context.Context, name string) (float64, error) {
	return k.ServerMetricOf(ctx, 0, name)
}

func (k *Konnectivity) ServerMetricOf(ctx context.Context, i int, name string) (float64, error) {
	return metric(ctx, http.DefaultClient, k.serverMetrics[i], name)
}

// AgentConnected returns nil when the i-th konnectivity server has an agent
// connected (its /readyz): the member's, the only agent of the servers.
func (k *Konnectivity) AgentConnected(ctx context.Context, i int) error {
	return httpOK(ctx, http.DefaultClient, k.serverReady[i])
}

func (k *Konnectivity) AgentMetric(ctx context.Context, name string) (float64, error) {
	return metric(ctx, k.agentClient, k.agentMetrics, name)
}

// Close stops the agent and the servers and removes the agent's network
// namespace.
func (k *Konnectivity) Close() error {
	var errs []error
	if k.Agent != nil && k.Agent.Running() {
		_ = k.Agent.Signal(syscall.SIGKILL) // it lingers on SIGTERM while the gateway's connections are open
	}
	for _, p := range append([]*Process{k.Agent}, k.Servers...) {
		if p != nil {
			errs = append(errs, p.Stop())
		}
	}
	if k.balancer != nil {
		errs = append(errs, k.balancer.l.Close())
	}
	if k.ns != nil {
		errs = append(errs, k.ns.delete())
		k.ns = nil
	}
	return errors.Join(errs...)
}

func metric(ctx context.Context, client *http.Client, url, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "{")) {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %q: %v", url, line, err)
			}
			sum += v
		}
	}
	return sum, nil
}

func httpOK(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// balancer stands in for the Service in front of several konnectivity
// servers' agent ports: each connection goes to the next of targets that
// accepts it, as a Service spreads connections over its ready endpoints.
type balancer struct {
	l       net.Listener
	targets []string
	next    atomic.Uint32
}

func startBalancer(targets []string) (*balancer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &balancer{l: l, targets: targets}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go b.serve(c)
		}
	}()
	return b, nil
}

func (b *balancer) serve(c net.Conn) {
	defer c.Close()
	first := int(b.next.Add(1))
	for i := range b.targets {
		up, err := net.Dial("tcp", b.targets[(first+i)%len(b.targets)])
		if err != nil {
			continue
		}
		defer up.Close()
		pipe(c, up)
		return
	}
}

func anySlice(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}
