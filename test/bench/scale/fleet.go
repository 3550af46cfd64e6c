package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
	"github.com/kubewharf/kube-gateway/test/harness"
	"github.com/kubewharf/kube-gateway/test/testca"
)

// Where the servers of the burst's UpstreamClusters are (-cluster-servers).
const (
	serversStandIns = "stand-ins"
	serversMemberA  = "member-a"
)

// standInSecret is the hub Secret with the gateway's client certificate
// toward the stand-ins.
const standInSecret = "bench-stand-ins"

// fleet is what the servers of the burst's clusters are: every cluster has
// one server in each slot (a member-a replica, or a stand-in process).
type fleet struct {
	Kind string
	// Slots are the servers' addresses (host:port) by slot; cluster i uses
	// Slots[s][i%len(Slots[s])] in each slot s.
	Slots [][]string
	// Secret is the hub Secret of the clusters' credential, in the gateway
	// namespace.
	Secret string
	// targets scrape each slot's /metrics (apiserver_request_total); pids
	// are the slots' processes, for their CPU.
	targets []*measure.Target
	pids    []int
	ports   [][]int
}

// endpoints are the servers of the burst's cluster i.
func (f *fleet) endpoints(i int) []string {
	var out []string
	for _, addrs := range f.Slots {
		out = append(out, "https://"+addrs[i%len(addrs)])
	}
	return out
}

// describe says what the servers are, for the report.
func (f *fleet) describe() string {
	if f.Kind == serversMemberA {
		return "member-a's two kube-apiserver replicas (every cluster names both)"
	}
	n := len(f.Slots[0])
	var hosts []string
	for _, addrs := range f.Slots {
		h, _, _ := net.SplitHostPort(addrs[0])
		hosts = append(hosts, h)
	}
	return fmt.Sprintf("%d stand-in member servers, processes of their own (`%s`, test/bench/scale/standin.go), on %s with %d ports each: "+
		"TLS 1.3 with HTTP/2 offered, a client certificate required and verified against a client CA (the gateway's comes from the hub Secret `%s`), "+
		"answering `/readyz`, `/livez`, `/healthz`, `/version`, `/api` and `/apis` as a kube-apiserver does (its response headers too, a new Audit-Id each) and 404 otherwise; "+
		"cluster i has its servers on port i mod %d of each, so every cluster's two servers are distinct hosts, and clusters share servers as they share member-a's in the other mode "+
		"(the gateway keeps transports and connections per cluster and server, so that changes nothing)",
		len(f.Slots), standInCommand, strings.Join(hosts, " and "), n, f.Secret, n)
}

// memberAFleet is member-a's replicas, with its Secret.
func memberAFleet(s *scene) *fleet {
	ma := s.env.Members[harness.MemberA]
	f := &fleet{Kind: serversMemberA, Secret: harness.MemberA, targets: s.memberA}
	for _, srv := range ma.Servers {
		f.Slots = append(f.Slots, []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(srv.Port))})
		f.pids = append(f.pids, srv.Process.PID())
		f.ports = append(f.ports, []int{srv.Port})
	}
	return f
}

// startStandIns starts n stand-in server processes on 127.0.100.1 ...
// 127.0.100.n with ports listeners each, their CA and client CA, and the hub
// Secret with the gateway's client certificate. env stops them.
func startStandIns(ctx context.Context, env *harness.Env, n, ports int) (*fleet, error) {
	dir := filepath.Join(env.WorkDir, "stand-ins")
	serving, err := testca.NewCA("bench-stand-in-serving", testca.Options{ValidFor: 24 * time.Hour})
	if err != nil {
		return nil, err
	}
	clients, err := testca.NewCA("bench-stand-in-clients", testca.Options{ValidFor: 24 * time.Hour})
	if err != nil {
		return nil, err
	}
	var hosts []string
	for i := range n {
		hosts = append(hosts, fmt.Sprintf("127.0.100.%d", i+1))
	}
	leaf, err := serving.Sign(testca.Spec{CommonName: "stand-in", SANs: hosts, Usage: x509.ExtKeyUsageServerAuth, NotAfter: time.Now().Add(24 * time.Hour)})
	if err != nil {
		return nil, err
	}
	certFile, keyFile, err := testca.WriteFiles(dir, "serving", leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		return nil, err
	}
	clientCAFile, _, err := testca.WriteFiles(dir, "client-ca", clients.PEM, clients.KeyPEM)
	if err != nil {
		return nil, err
	}
	gw, err := clients.Sign(testca.Spec{CommonName: "kube-gateway", Usage: x509.ExtKeyUsageClientAuth, NotAfter: time.Now().Add(24 * time.Hour)})
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(env.HubConfig(harness.UserAdmin))
	if err != nil {
		return nil, err
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: standInSecret, Namespace: harness.GatewayNamespace}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": gw.CertPEM, "tls.key": gw.KeyPEM, "ca.crt": serving.PEM}}
	if _, err := cs.CoreV1().Secrets(harness.GatewayNamespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("secret %s: %w", standInSecret, err)
	}
	// The bench scrapes the stand-ins with a client certificate of its own.
	benchCert, err := tls.X509KeyPair(gw.CertPEM, gw.KeyPEM)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	f := &fleet{Kind: serversStandIns, Secret: standInSecret}
	for i, host := range hosts {
		addrFile := filepath.Join(dir, fmt.Sprintf("stand-in-%d.addr", i+1))
		_ = os.Remove(addrFile)
		var addrs []string
		p, err := env.StartExtra(ctx, harness.ExtraProcess{
			Name: fmt.Sprintf("stand-in-%d", i+1),
			Args: func() []string {
				return []string{exe, standInCommand, "--cert", certFile, "--key", keyFile, "--client-ca", clientCAFile,
					"--host", host, "--ports", strconv.Itoa(ports), "--addr-file", addrFile}
			},
			Ready: func(context.Context) error {
				data, err := os.ReadFile(addrFile)
				if err != nil {
					return err
				}
				addrs = strings.Fields(string(data))
				return nil
			},
			Timeout: 30 * time.Second,
		})
		if err != nil {
			return nil, fmt.Errorf("stand-in %s: %w", host, err)
		}
		client, err := measure.NewClient(serving.PEM, &benchCert, 30*time.Second)
		if err != nil {
			return nil, err
		}
		var ps []int
		for _, a := range addrs {
			_, port, _ := net.SplitHostPort(a)
			n, _ := strconv.Atoi(port)
			ps = append(ps, n)
		}
		f.Slots = append(f.Slots, addrs)
		f.ports = append(f.ports, ps)
		f.pids = append(f.pids, p.PID())
		f.targets = append(f.targets, &measure.Target{Key: "stand-in", Base: "https://" + addrs[0], Client: client})
	}
	return f, nil
}

// probes adds up the /readyz requests every server of f served.
func (f *fleet) probes(ctx context.Context) (float64, error) {
	var sum float64
	for _, t := range f.targets {
		m, err := t.Scrape(ctx, t.Base+"/metrics")
		if err != nil {
			return 0, err
		}
		v, _ := m.Sum("apiserver_request_total", map[string]string{"subresource": "/readyz"})
		sum += v
	}
	return sum, nil
}

// cpuTicks adds up the CPU ticks of f's processes.
func (f *fleet) cpuTicks() int64 {
	var n int64
	for _, pid := range f.pids {
		t, _ := measure.CPUTicks(pid)
		n += t
	}
	return n
}

// rssKB adds up the RSS of f's processes.
func (f *fleet) rssKB() int64 {
	var n int64
	for _, pid := range f.pids {
		kb, _ := measure.RSSKB(pid)
		n += kb
	}
	return n
}

// conns counts conns to f's servers, by slot.
func (f *fleet) conns(conns []measure.Conn) []int {
	out := make([]int, len(f.ports))
	for s, ps := range f.ports {
		for _, p := range ps {
			out[s] += measure.CountConns(conns, p, true)
		}
	}
	return out
}
