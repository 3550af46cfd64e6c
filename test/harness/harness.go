// Package harness starts a complete kube-gateway test environment from real
// binaries on 127.0.0.1: an etcd for the hub and the members and another for
// the gateway, a hub kube-apiserver with front-proxy
// (aggregation) flags, two member clusters (member-a with two kube-apiserver
// replicas, member-b with one), a kube-controller-manager per cluster (the
// namespace, service-account, token, ClusterRole aggregation and garbage
// collector controllers), a stand-in kubelet for exec / attach /
// port-forward on member-a, and the kube-gateway aggregated API server
// registered on the hub through an APIService, with an UpstreamCluster per
// member.
//
// The end-to-end suite (test/e2e) and hack/local-up share it:
//
//	env, err := harness.Start(ctx, harness.Config{WorkDir: t.TempDir()})
//	if err != nil { t.Fatal(err) }
//	defer env.Stop()
//
// Users (bearer tokens in the token files): on the hub admin
// (system:masters), alice (uid alice-uid, group dev-team; may use
// upstreamclusters/proxy), bob (uid bob-uid, nothing granted) and
// kube-gateway (the gateway's own hub identity); on each member admin and
// kube-gateway (a different token per member, stored in the hub Secret
// kube-gateway/<member>). On member-a alice may edit namespace alice; on
// member-b she has no rights.
package harness

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/kubewharf/kube-gateway/test/testca"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// User names known to the environment.
const (
	UserAdmin   = "admin"
	UserAlice   = "alice"
	UserBob     = "bob"
	UserGateway = "kube-gateway"
)

// AdminGroups returns the hub admin's groups as the hub authenticates it, the
// ones its aggregator sends the gateway in X-Remote-Group.
func AdminGroups() []string { return []string{"system:masters", "system:authenticated"} }

// AdminFrontProxyHeader returns the identity headers the hub's aggregator
// sends the gateway for its admin, next to its front-proxy client certificate.
func AdminFrontProxyHeader() http.Header {
	return http.Header{"X-Remote-User": {UserAdmin}, "X-Remote-Group": AdminGroups()}
}

// Names used on the hub and the members.
const (
	GatewayNamespace = "kube-gateway" // hub namespace of the Service and member Secrets
	GatewayService   = "kube-gateway"
	MemberA          = "member-a"
	MemberB          = "member-b"
	StandInNode      = "stand-in" // Node on member-a backed by the stand-in kubelet
	AliceNamespace   = "alice"
	ShellPod         = "shell" // Pod alice/shell on member-a, container "main"
)

// UpstreamClusterGVR is the resource the gateway serves.
var UpstreamClusterGVR = schema.GroupVersionResource{Group: "gateway.kubewharf.io", Version: "v1alpha1", Resource: "upstreamclusters"}

// ProxyPath returns the hub path prefix that proxies to member (no trailing
// slash). Spelled out rather than taken from the code under test, so that tests
// comparing with it can fail.
func ProxyPath(member string) string {
	return "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/" + member + "/proxy"
}

// Config tells Start where to find binaries and where to put its files.
type Config struct {
	// BinDir holds etcd, kube-apiserver, kube-controller-manager, kubectl and
	// kube-gateway.
	// Default: $KUBE_GATEWAY_BIN_DIR, else <repo root>/_output/bin.
	BinDir string
	// WorkDir receives certs, data, logs, audit logs and kubeconfigs; it is
	// created if missing.
	WorkDir string
	// Detach makes the processes outlive this program (local-up): they run
	// in their own sessions, the stand-in kubelet runs as a separate process
	// (os.Executable() with the hidden subcommand "stand-in-kubelet", see
	// StandInKubeletMain), and WorkDir/state.json lists them for
	// StopFromState.
	Detach bool
	// NoGateway starts etcd, the hub and the members only; Env.Gateway is nil
	// and no APIService or UpstreamCluster is created.
	NoGateway bool
	// HubArgs are appended to the hub kube-apiserver's command line.
	HubArgs []string
	// GatewayArgs are appended to the kube-gateway command line.
	GatewayArgs []string
	// GatewayEnv is added to the environment of the kube-gateway process only
	// (e.g. GOGC=400 for the benchmark).
	GatewayEnv []string
	// StatusLeaseOnly grants the gateway's identity get, create and update on
	// Leases (the status Lease and its own replica Lease) but not list, watch
	// and delete, which the chart grants: every gateway then counts 1
	// replica and enforces whole flow-control limits, however many run
	// (the e2e suite, whose extra gateways would otherwise divide the limits
	// of the suite's gateway).
	StatusLeaseOnly bool
	// MemberDoors opens the member door of each member's UpstreamCluster
	// under <member>.gateway.test and writes <member>-admin@gateway
	// kubeconfigs that use it with the member's own admin certificate
	// (local-up).
	MemberDoors bool
	// Log receives progress lines; may be nil.
	Log io.Writer
}

// Env is a running environment. Stop it with Stop.
type Env struct {
	WorkDir string
	BinDir  string
	// Hub is the hub cluster; Members holds member-a and member-b.
	Hub     *Cluster
	Members map[string]*Cluster
	// Etcd serves the hub and the members (prefixes /hub, /member-a,
	// /member-b) at EtcdURL.
	Etcd    *Process
	EtcdURL string
	// GatewayEtcd is the gateway's own etcd (prefix /kube-gateway) at
	// GatewayEtcdURL, so that a test can stop it while the hub and the members
	// keep running (nil with Config.NoGateway).
	GatewayEtcd    *Process
	GatewayEtcdURL string
	// Gateway is the kube-gateway process (nil with Config.NoGateway), serving
	// at GatewayURL with a certificate from GatewayCAFile.
	Gateway       *Process
	GatewayURL    string
	GatewayCAFile string
	// MemberDoorAddress is host:port of the gateway's member door
	// (--member-door-port), on 127.0.0.1.
	MemberDoorAddress string
	// Kubelet is the stand-in kubelet behind Node "stand-in" on member-a.
	Kubelet *StandInKubelet

	cfg     Config
	began   time.Time
	pki     *pki
	mu      sync.Mutex
	procs   []*Process // in start order
	stopped bool
	stateMu sync.Mutex // serializes writeState
}

// Cluster is the hub or a member.
type Cluster struct {
	Name string
	// Servers are the cluster's kube-apiserver replicas (they share one etcd
	// prefix, service-account keys and serving certificate).
	Servers []*APIServer
	// CAFile / CAData: the CA of the serving certificate.
	CAFile string
	CAData []byte
	// AdminConfig is user admin on Servers[0].
	AdminConfig *rest.Config
	// Tokens maps user name to bearer token.
	Tokens map[string]string
	// EtcdPrefix is the --etcd-prefix of every replica.
	EtcdPrefix string
	// Etcd is the cluster's own etcd (StartMember), nil when it shares the
	// environment's.
	Etcd *Process
	// ControllerManager is the cluster's kube-controller-manager, a client of
	// Servers[0].
	ControllerManager *Process

	dir      string // <WorkDir>/clusters/<name>
	ca       *certAuthority
	serving  *keyPair
	saKey    string
	tokens   string // token file
	policy   string // audit policy file
	hub      bool
	replicas int
	ownEtcd  string // Etcd's client URL
}

// APIServer is one kube-apiserver replica.
type APIServer struct {
	// Name is <cluster>-<n>, n from 1.
	Name    string
	URL     string // https://127.0.0.1:<Port>
	Port    int
	Process *Process
	// AuditLog is this replica's own audit log (JSON lines, stage
	// ResponseComplete, level Metadata for every request except those of
	// system:apiserver (its own loopback client) and /readyz, /livez,
	// /healthz).
	AuditLog string
}

// StandInKubelet is the test/kubelet server behind Node "stand-in".
type StandInKubelet struct {
	Addr string // 127.0.0.1:<Port>
	Port int
	// Process is set with Config.Detach (the kubelet runs as its own
	// process); otherwise it runs inside this program and Process is nil.
	Process *Process

	close func() error
}

// Config returns a client config for user on replica i of the cluster.
func (c *Cluster) Config(user string, i int) *rest.Config {
	return &rest.Config{
		Host:            c.Servers[i].URL,
		BearerToken:     c.Tokens[user],
		TLSClientConfig: rest.TLSClientConfig{CAData: c.CAData},
		QPS:             -1, // no client-side throttling
	}
}

// HubConfig returns a client config for user (admin, alice, bob or
// kube-gateway) on the hub.
func (e *Env) HubConfig(user string) *rest.Config {
	if _, ok := e.Hub.Tokens[user]; !ok {
		panic(fmt.Sprintf("harness: no hub user %q", user))
	}
	return e.Hub.Config(user, 0)
}

// ProxyConfig returns a client config for the hub user whose Host is the
// hub URL plus ProxyPath(member): every request goes hub -> kube-gateway ->
// member as that user.
func (e *Env) ProxyConfig(user, member string) *rest.Config {
	cfg := e.HubConfig(user)
	cfg.Host = e.Hub.Servers[0].URL + ProxyPath(member)
	return cfg
}

// Kubeconfig returns the path of a written kubeconfig, by name with or
// without ".kubeconfig": hub-admin, hub-alice, hub-bob, member-a-admin,
// member-b-admin (direct), alice@member-a, alice@member-b, admin@member-a,
// admin@member-b (through the hub and the gateway), hub-kube-gateway.
func (e *Env) Kubeconfig(name string) string {
	return filepath.Join(e.WorkDir, strings.TrimSuffix(name, ".kubeconfig")+".kubeconfig")
}

// KubectlCmd returns an unstarted kubectl command with --kubeconfig (a name
// for Kubeconfig, or a path containing "/") and a private cache dir, for
// callers that need stdin or a long-running kubectl (port-forward).
func (e *Env) KubectlCmd(ctx context.Context, kubeconfig string, args ...string) *exec.Cmd {
	path := kubeconfig
	if !strings.Contains(kubeconfig, "/") {
		path = e.Kubeconfig(kubeconfig)
	}
	cache := filepath.Join(e.WorkDir, "kubectl-cache", strings.TrimSuffix(filepath.Base(path), ".kubeconfig"))
	all := append([]string{"--kubeconfig=" + path, "--cache-dir=" + cache}, args...)
	cmd := exec.CommandContext(ctx, filepath.Join(e.BinDir, "kubectl"), all...)
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBECONFIG=") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	return cmd
}

// Kubectl runs kubectl (see KubectlCmd) and returns its output. A non-zero
// exit is an error that includes stderr.
func (e *Env) Kubectl(ctx context.Context, kubeconfig string, args ...string) (stdout, stderr string, err error) {
	cmd := e.KubectlCmd(ctx, kubeconfig, args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	if err != nil {
		err = fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), errb.String(), err
}

func (e *Env) logf(format string, args ...any) {
	if e.cfg.Log == nil {
		return
	}
	fmt.Fprintf(e.cfg.Log, "[harness %6.1fs] %s\n", time.Since(e.began).Seconds(), fmt.Sprintf(format, args...))
}

func (e *Env) track(p *Process) {
	e.mu.Lock()
	e.procs = append(e.procs, p)
	e.mu.Unlock()
}

// Stop stops every process Start started (gateway, apiservers, controller
// managers, stand-in kubelet, the etcds), each by its own PID: SIGTERM, then SIGKILL after 20 s. It is
// safe to call more than once. With Detach it also removes state.json.
func (e *Env) Stop() error {
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return nil
	}
	e.stopped = true
	procs := append([]*Process(nil), e.procs...)
	e.mu.Unlock()

	var errs []error
	if e.Gateway != nil {
		errs = append(errs, e.Gateway.Stop())
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, p := range procs {
		if p == e.Gateway || p == e.Etcd || p == e.GatewayEtcd {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := p.Stop()
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if e.Kubelet != nil && e.Kubelet.close != nil {
		errs = append(errs, e.Kubelet.close())
	}
	for _, p := range []*Process{e.GatewayEtcd, e.Etcd} {
		if p != nil {
			errs = append(errs, p.Stop())
		}
	}
	if e.cfg.Detach {
		if err := os.Remove(filepath.Join(e.WorkDir, stateFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// --- state.json (Detach) ---

const stateFile = "state.json"

// State is the content of WorkDir/state.json written with Config.Detach.
type State struct {
	WorkDir     string         `json:"workDir"`
	HubURL      string         `json:"hubURL,omitempty"`
	GatewayURL  string         `json:"gatewayURL,omitempty"`
	Processes   []StateProcess `json:"processes"` // in start order
	Ready       bool           `json:"ready"`     // Start finished
	Kubeconfigs []string       `json:"kubeconfigs,omitempty"`
}

// StateProcess is one detached process.
type StateProcess struct {
	Name string   `json:"name"`
	PID  int      `json:"pid"`
	Args []string `json:"args"` // compared with /proc/<pid>/cmdline before signalling
	Log  string   `json:"log"`
}

func (e *Env) writeState(ready bool) error {
	if !e.cfg.Detach {
		return nil
	}
	e.stateMu.Lock()
	defer e.stateMu.Unlock()
	e.mu.Lock()
	st := State{WorkDir: e.WorkDir, GatewayURL: e.GatewayURL, Ready: ready}
	for _, p := range e.procs {
		if pid := p.PID(); pid != 0 {
			st.Processes = append(st.Processes, StateProcess{Name: p.Name, PID: pid, Args: p.Args, Log: p.LogFile})
		}
	}
	e.mu.Unlock()
	if e.Hub != nil && len(e.Hub.Servers) > 0 {
		st.HubURL = e.Hub.Servers[0].URL
	}
	if ready {
		st.Kubeconfigs = kubeconfigNames(e)
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(e.WorkDir, stateFile+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(e.WorkDir, stateFile))
}

// ReadState reads WorkDir/state.json; it returns an error wrapping
// os.ErrNotExist when there is none.
func ReadState(workDir string) (*State, error) {
	data, err := os.ReadFile(filepath.Join(workDir, stateFile))
	if err != nil {
		return nil, err
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(workDir, stateFile), err)
	}
	return &st, nil
}

// Running returns the processes of the state that still run (same PID and
// same command line).
func (st *State) Running() []StateProcess {
	var out []StateProcess
	for _, p := range st.Processes {
		if isOurs(p.PID, p.Args) {
			out = append(out, p)
		}
	}
	return out
}

// StopFromState stops the processes listed in workDir/state.json, in
// reverse start order, each only if /proc/<pid>/cmdline still shows the
// command line that was recorded. It does not remove state.json.
func StopFromState(workDir string) error {
	st, err := ReadState(workDir)
	if err != nil {
		return err
	}
	var errs []error
	for i := len(st.Processes) - 1; i >= 0; i-- {
		p := st.Processes[i]
		errs = append(errs, stopPID(p.Name, p.PID, p.Args))
	}
	return errors.Join(errs...)
}

// --- kubeconfigs ---

// kubeconfigEntry names the context, cluster and user of one kubeconfig
// distinctly from those of every other kubeconfig the environment writes, so
// that any of them merge (KUBECONFIG=a:b, where the first entry of a name
// wins) with each context keeping its own server and credentials. Clusters
// are "hub", the member's name (directly) or "gateway-<member>" (through hub
// and gateway); users are <user>@<cluster>; contexts are the cluster's name
// for admin directly (--context hub, --context member-a), else <user>@hub or
// <user>@<member>, as the kubeconfig files are named.
type kubeconfigEntry struct{ context, cluster, user string }

func entry(context, user, cluster string) kubeconfigEntry {
	return kubeconfigEntry{context: context, cluster: cluster, user: user + "@" + cluster}
}

func writeKubeconfig(path string, n kubeconfigEntry, server string, caPEM []byte, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[n.cluster] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[n.user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[n.context] = &clientcmdapi.Context{Cluster: n.cluster, AuthInfo: n.user}
	cfg.CurrentContext = n.context
	return clientcmd.WriteToFile(*cfg, path)
}

func kubeconfigNames(e *Env) []string {
	names := []string{"hub-admin", "hub-alice", "hub-bob"}
	for _, m := range []string{MemberA, MemberB} {
		names = append(names, m+"-admin")
	}
	for _, u := range []string{UserAlice, UserAdmin} {
		for _, m := range []string{MemberA, MemberB} {
			names = append(names, u+"@"+m)
		}
	}
	if e.cfg.MemberDoors && e.MemberDoorAddress != "" {
		for _, m := range []string{MemberA, MemberB} {
			names = append(names, DoorKubeconfig(m))
		}
	}
	paths := make([]string, len(names))
	for i, n := range names {
		paths[i] = e.Kubeconfig(n)
	}
	return paths
}

func (e *Env) writeKubeconfigs() error {
	hub := e.Hub
	hubURL := hub.Servers[0].URL
	for _, u := range []string{UserAdmin, UserAlice, UserBob, UserGateway} {
		n := entry(u+"@hub", u, "hub")
		if u == UserAdmin {
			n.context = "hub"
		}
		if err := writeKubeconfig(e.Kubeconfig("hub-"+u), n, hubURL, hub.CAData, hub.Tokens[u]); err != nil {
			return err
		}
	}
	for _, m := range []string{MemberA, MemberB} {
		c := e.Members[m]
		if err := writeKubeconfig(e.Kubeconfig(m+"-admin"), entry(m, UserAdmin, m), c.Servers[0].URL, c.CAData, c.Tokens[UserAdmin]); err != nil {
			return err
		}
		for _, u := range []string{UserAlice, UserAdmin} {
			n := entry(u+"@"+m, u, "gateway-"+m)
			if err := writeKubeconfig(e.Kubeconfig(u+"@"+m), n, hubURL+ProxyPath(m), hub.CAData, hub.Tokens[u]); err != nil {
				return err
			}
		}
	}
	return e.writeMergedKubeconfig()
}

// MergedKubeconfig is the path of one kubeconfig with every context of the
// environment's kubeconfigs, the hub's admin current: tools that need the hub
// (kube-gateway kubeconfig, join, kubectl gateway) work without --context.
func (e *Env) MergedKubeconfig() string { return filepath.Join(e.WorkDir, "kubeconfig") }

func (e *Env) writeMergedKubeconfig() error {
	merged := clientcmdapi.NewConfig()
	for _, path := range kubeconfigNames(e) {
		cfg, err := clientcmd.LoadFromFile(path)
		if err != nil {
			return err
		}
		maps.Copy(merged.Clusters, cfg.Clusters)
		maps.Copy(merged.AuthInfos, cfg.AuthInfos)
		maps.Copy(merged.Contexts, cfg.Contexts)
	}
	merged.CurrentContext = "hub"
	return clientcmd.WriteToFile(*merged, e.MergedKubeconfig())
}

// --- locating binaries ---

const modulePath = "github.com/kubewharf/kube-gateway"

// RepoRoot returns the root of the kube-gateway module: the first parent of
// the working directory whose go.mod declares it, else the one this source
// file was compiled from.
func RepoRoot() (string, error) {
	isRoot := func(dir string) bool {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		return err == nil && strings.Contains(string(data), "module "+modulePath+"\n")
	}
	if wd, err := os.Getwd(); err == nil {
		for dir := wd; ; dir = filepath.Dir(dir) {
			if isRoot(dir) {
				return dir, nil
			}
			if dir == filepath.Dir(dir) {
				break
			}
		}
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		dir := filepath.Dir(filepath.Dir(filepath.Dir(file)))
		if isRoot(dir) {
			return dir, nil
		}
	}
	return "", errors.New("cannot find the kube-gateway repository root (go.mod with module " + modulePath + ")")
}

// DefaultBinDir is $KUBE_GATEWAY_BIN_DIR, else <repo root>/_output/bin.
func DefaultBinDir() (string, error) {
	if d := os.Getenv("KUBE_GATEWAY_BIN_DIR"); d != "" {
		return filepath.Abs(d)
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "_output", "bin"), nil
}

// GatewayBinary returns the kube-gateway path in binDir ("" = default) and
// whether it exists.
func GatewayBinary(binDir string) (string, bool) {
	if binDir == "" {
		d, err := DefaultBinDir()
		if err != nil {
			return "", false
		}
		binDir = d
	}
	p := filepath.Join(binDir, "kube-gateway")
	st, err := os.Stat(p)
	return p, err == nil && !st.IsDir()
}

func checkBinaries(binDir string, names ...string) error {
	var missing []string
	for _, n := range names {
		if st, err := os.Stat(filepath.Join(binDir, n)); err != nil || st.IsDir() {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	hint := "run `make tools` (builds etcd, kube-apiserver, kube-controller-manager, kubectl)"
	if len(missing) == 1 && missing[0] == "kube-gateway" {
		hint = "run `go build -o _output/bin/kube-gateway ./cmd/kube-gateway`"
	}
	return fmt.Errorf("missing in %s: %s; %s", binDir, strings.Join(missing, ", "), hint)
}

// FrontProxyClientCert returns the certificate and key the hub presents to the
// gateway (CN front-proxy-client, signed by the request-header CA): with it, a
// test can call the gateway directly the way the hub does.
func (e *Env) FrontProxyClientCert() (certFile, keyFile string) {
	return e.pki.frontProxyClient.CertFile, e.pki.frontProxyClient.KeyFile
}

// FrontProxyCAFile returns the request-header (front-proxy) CA that signs the
// hub's front-proxy client certificate.
func (e *Env) FrontProxyCAFile() string {
	return e.pki.frontProxyCA.CertFile
}

// GatewayServingCert returns the serving certificate and key of the gateway
// (signed by GatewayCAFile); StartExtraGateway uses them too.
func (e *Env) GatewayServingCert() (certFile, keyFile string) {
	return e.pki.gatewayServing.CertFile, e.pki.gatewayServing.KeyFile
}

// IssueClientCert issues a client certificate for common name cn into the work
// dir: signed by the request-header (front-proxy) CA when frontProxyCA is true,
// else by a new CA of its own that nothing trusts. Security tests use it to
// call the gateway with certificates it must not trust.
func (e *Env) IssueClientCert(cn string, frontProxyCA bool) (certFile, keyFile string, err error) {
	dir := filepath.Join(e.WorkDir, "pki", "issued")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	ca := e.pki.frontProxyCA
	name := "front-proxy-signed-" + cn
	if !frontProxyCA {
		if ca, err = newCA(dir, "untrusted-ca-"+cn); err != nil {
			return "", "", err
		}
		name = "untrusted-" + cn
	}
	kp, err := ca.issue(dir, name, certSpec{CommonName: cn})
	if err != nil {
		return "", "", err
	}
	return kp.CertFile, kp.KeyFile, nil
}

// ClientCertificate issues a client certificate of the cluster's client CA
// (its apiservers' --client-ca-file) for user cn in groups: the member's own
// credential, as a kubelet's or a controller's.
func (c *Cluster) ClientCertificate(cn string, groups ...string) (certPEM, keyPEM []byte, err error) {
	leaf, err := c.ca.ca.Sign(testca.Spec{CommonName: cn, Organization: groups, Usage: x509.ExtKeyUsageClientAuth})
	if err != nil {
		return nil, nil, err
	}
	return leaf.CertPEM, leaf.KeyPEM, nil
}
