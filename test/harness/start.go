package harness

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Deadlines of the start-up phases.
const (
	etcdReadyTimeout      = 60 * time.Second
	apiserverReadyTimeout = 3 * time.Minute
	gatewayReadyTimeout   = 2 * time.Minute
	setupTimeout          = 2 * time.Minute
	apiServiceTimeout     = 2 * time.Minute
	proxyReadyTimeout     = 2 * time.Minute
)

type pki struct {
	frontProxyCA     *certAuthority
	frontProxyClient *keyPair // CN front-proxy-client
	kubeletClientCA  *certAuthority
	kubeletClient    *keyPair // members' --kubelet-client-certificate
	kubeletCA        *certAuthority
	kubeletServing   *keyPair // stand-in kubelet, 127.0.0.1
	gatewayCA        *certAuthority
	gatewayServing   *keyPair
}

// Start brings the whole environment up and returns when the gateway proxies
// /version of member-a through the hub (or, with NoGateway, when the hub and
// members are set up). On any error it stops everything it started.
func Start(ctx context.Context, cfg Config) (_ *Env, err error) {
	e := &Env{cfg: cfg, began: time.Now(), Members: map[string]*Cluster{}}
	if cfg.WorkDir == "" {
		return nil, errors.New("harness: Config.WorkDir is required")
	}
	if e.WorkDir, err = filepath.Abs(cfg.WorkDir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(e.WorkDir, 0o755); err != nil {
		return nil, err
	}
	e.BinDir = cfg.BinDir
	if e.BinDir == "" {
		if e.BinDir, err = DefaultBinDir(); err != nil {
			return nil, err
		}
	} else if e.BinDir, err = filepath.Abs(e.BinDir); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(e.WorkDir, "data", "etcd")); err == nil {
		return nil, fmt.Errorf("harness: %s already holds an environment's etcd data; use an empty work dir", e.WorkDir)
	}
	bins := []string{"etcd", "kube-apiserver", "kube-controller-manager", "kubectl"}
	if !cfg.NoGateway {
		bins = append(bins, "kube-gateway")
	}
	if err := checkBinaries(e.BinDir, bins...); err != nil {
		return nil, err
	}

	defer func() {
		if err != nil {
			e.logf("start failed, stopping what was started")
			if serr := e.Stop(); serr != nil {
				err = fmt.Errorf("%w\n(cleanup: %v)", err, serr)
			}
			err = fmt.Errorf("harness: %w (logs in %s)", err, filepath.Join(e.WorkDir, "logs"))
		}
	}()

	e.logf("work dir %s, binaries %s", e.WorkDir, e.BinDir)
	if err := e.makeClusters(); err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}

	// The etcds and the stand-in kubelet.
	starts := []func() error{func() error { return e.startEtcd(ctx) }, func() error { return e.startKubelet(ctx) }}
	if !cfg.NoGateway {
		starts = append(starts, func() error { return e.startGatewayEtcd(ctx) })
	}
	if err := parallel(starts...); err != nil {
		return nil, err
	}
	e.logf("etcd at %s, stand-in kubelet at %s", e.EtcdURL, e.Kubelet.Addr)
	if e.GatewayEtcd != nil {
		e.logf("gateway's etcd at %s", e.GatewayEtcdURL)
	}

	// All kube-apiservers at once.
	starts = nil
	for _, c := range e.clusters() {
		for _, s := range c.Servers {
			starts = append(starts, func() error { return e.startAPIServer(ctx, c, s) })
		}
	}
	if err := parallel(starts...); err != nil {
		return nil, err
	}
	for _, c := range e.clusters() {
		var urls []string
		for _, s := range c.Servers {
			urls = append(urls, s.URL)
		}
		e.logf("%s ready at %s", c.Name, strings.Join(urls, ", "))
	}
	if err := e.writeKubeconfigs(); err != nil {
		return nil, fmt.Errorf("kubeconfigs: %w", err)
	}

	// Objects on the hub and the members, while the controller managers start
	// (setup waits for the ServiceAccounts they create).
	sctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	starts = []func() error{
		func() error { return e.setupHub(sctx) },
		func() error { return e.setupMember(sctx, e.Members[MemberA]) },
		func() error { return e.setupMember(sctx, e.Members[MemberB]) },
	}
	for _, c := range e.clusters() {
		starts = append(starts, func() error { return e.startControllerManager(ctx, c) })
	}
	if err := parallel(starts...); err != nil {
		return nil, err
	}
	e.logf("hub and members set up, controller managers ready")

	if !cfg.NoGateway {
		if err := e.startGateway(ctx); err != nil {
			return nil, err
		}
		e.logf("kube-gateway ready at %s", e.GatewayURL)
		if err := e.registerGateway(ctx); err != nil {
			return nil, err
		}
		e.logf("APIService v1alpha1.gateway.kubewharf.io Available")
		if err := e.createUpstreamClusters(ctx); err != nil {
			return nil, err
		}
		e.logf("member-a answers through hub and gateway")
		if cfg.MemberDoors {
			if err := e.openMemberDoors(ctx); err != nil {
				return nil, fmt.Errorf("member doors: %w", err)
			}
			e.logf("member doors open at %s", e.MemberDoorAddress)
		}
	}
	if err := e.writeState(true); err != nil {
		return nil, err
	}
	e.logf("environment ready in %.1fs", time.Since(e.began).Seconds())
	return e, nil
}

func (e *Env) clusters() []*Cluster {
	return []*Cluster{e.Hub, e.Members[MemberA], e.Members[MemberB]}
}

// parallel runs fns concurrently and joins their errors.
func parallel(fns ...func() error) error {
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// makeClusters creates certificates, keys, token files and audit policies.
func (e *Env) makeClusters() error {
	pkiDir := filepath.Join(e.WorkDir, "pki")
	p := &pki{}
	var err error
	if p.frontProxyCA, err = newCA(pkiDir, "front-proxy-ca"); err != nil {
		return err
	}
	if p.frontProxyClient, err = p.frontProxyCA.issue(pkiDir, "front-proxy-client", certSpec{CommonName: "front-proxy-client"}); err != nil {
		return err
	}
	if p.kubeletClientCA, err = newCA(pkiDir, "kubelet-client-ca"); err != nil {
		return err
	}
	if p.kubeletClient, err = p.kubeletClientCA.issue(pkiDir, "kubelet-client", certSpec{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}}); err != nil {
		return err
	}
	if p.kubeletCA, err = newCA(pkiDir, "kubelet-ca"); err != nil {
		return err
	}
	if p.kubeletServing, err = p.kubeletCA.issue(pkiDir, "kubelet-serving", loopbackServing(StandInNode)); err != nil {
		return err
	}
	if p.gatewayCA, err = newCA(pkiDir, "gateway-ca"); err != nil {
		return err
	}
	if p.gatewayServing, err = p.gatewayCA.issue(pkiDir, "gateway-serving", loopbackServing(GatewayService+"."+GatewayNamespace+".svc")); err != nil {
		return err
	}
	e.pki = p
	e.GatewayCAFile = p.gatewayCA.CertFile

	if e.Hub, err = e.newCluster("hub", 1, true, map[string]string{
		UserAdmin: "system:masters", UserAlice: "dev-team", UserBob: "", UserGateway: "",
	}); err != nil {
		return err
	}
	for _, m := range []struct {
		name     string
		replicas int
	}{{MemberA, 2}, {MemberB, 1}} {
		c, err := e.newCluster(m.name, m.replicas, false, map[string]string{UserAdmin: "system:masters", UserGateway: ""})
		if err != nil {
			return err
		}
		e.Members[m.name] = c
	}
	return nil
}

// newCluster creates the certificates, keys, token file (a token per user of
// users, mapped to its groups) and audit policy of cluster name.
func (e *Env) newCluster(name string, replicas int, hub bool, users map[string]string) (*Cluster, error) {
	dir := filepath.Join(e.WorkDir, "clusters", name)
	c := &Cluster{Name: name, EtcdPrefix: "/" + name, dir: dir, hub: hub, replicas: replicas, Tokens: map[string]string{}}
	ca, err := newCA(dir, "ca")
	if err != nil {
		return nil, err
	}
	c.CAFile, c.CAData, c.ca = ca.CertFile, ca.CertPEM, ca
	if c.serving, err = ca.issue(dir, "serving", loopbackServing("kubernetes", "kubernetes.default", "kubernetes.default.svc")); err != nil {
		return nil, err
	}
	c.saKey = filepath.Join(dir, "service-account.key")
	if err := serviceAccountKey(c.saKey); err != nil {
		return nil, err
	}
	// token,user,uid,"group1,group2"
	var lines []string
	for _, u := range sortedKeys(users) {
		tok := randomToken()
		c.Tokens[u] = tok
		line := tok + "," + u + "," + u + "-uid"
		if g := users[u]; g != "" {
			line += `,"` + g + `"`
		}
		lines = append(lines, line)
	}
	c.tokens = filepath.Join(dir, "tokens.csv")
	if err := writeFile(c.tokens, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return nil, err
	}
	c.policy = filepath.Join(dir, "audit-policy.yaml")
	if err := writeFile(c.policy, []byte(auditPolicy), 0o644); err != nil {
		return nil, err
	}
	for i := 1; i <= replicas; i++ {
		n := fmt.Sprintf("%s-%d", name, i)
		c.Servers = append(c.Servers, &APIServer{Name: n, AuditLog: filepath.Join(e.WorkDir, "audit", n, "audit.log")})
	}
	return c, nil
}

// auditPolicy logs every request at Metadata except the apiserver's own
// loopback traffic and the health probes the harness and the gateway's health
// checker send.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  users: ["system:apiserver"]
- level: None
  nonResourceURLs: ["/readyz", "/readyz/*", "/livez", "/livez/*", "/healthz", "/healthz/*"]
- level: Metadata
`

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

func (e *Env) newProcess(name string) *Process {
	return &Process{Name: name, LogFile: filepath.Join(e.WorkDir, "logs", name+".log"), detach: e.cfg.Detach}
}

// startTracked starts p (retrying on port clashes with reassign), records it
// for Stop and state.json, and waits until it is ready.
func (e *Env) startTracked(ctx context.Context, p *Process, reassign func()) error {
	e.track(p)
	p.onStart = func() { _ = e.writeState(false) }
	return p.startReady(ctx, reassign)
}

func (e *Env) startEtcd(ctx context.Context) error {
	p, err := e.startEtcdProcess(ctx, "etcd", &e.EtcdURL)
	e.Etcd = p
	return err
}

// startGatewayEtcd starts the gateway's own etcd, so that a test can stop it
// without stopping the hub and the members.
func (e *Env) startGatewayEtcd(ctx context.Context) error {
	p, err := e.startEtcdProcess(ctx, "gateway-etcd", &e.GatewayEtcdURL)
	e.GatewayEtcd = p
	return err
}

// startEtcdProcess starts a single-member etcd named name on loopback, with
// its data in <WorkDir>/data/<name>, and sets *url to its client URL.
func (e *Env) startEtcdProcess(ctx context.Context, name string, url *string) (*Process, error) {
	p := e.newProcess(name)
	dataDir := filepath.Join(e.WorkDir, "data", name)
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return p, err
	}
	var clientURL string
	assign := func() {
		client, peer := mustFreePort(), mustFreePort()
		clientURL = "http://127.0.0.1:" + strconv.Itoa(client)
		peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
		*url = clientURL
		p.Args = []string{
			filepath.Join(e.BinDir, "etcd"),
			"--name=" + name,
			"--data-dir=" + dataDir,
			"--listen-client-urls=" + clientURL,
			"--advertise-client-urls=" + clientURL,
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=" + name + "=" + peerURL,
			"--initial-cluster-state=new",
			"--unsafe-no-fsync=true",
			"--quota-backend-bytes=4294967296",
			"--log-level=warn",
		}
	}
	assign()
	p.timeout = etcdReadyTimeout
	client := &http.Client{Timeout: 2 * time.Second}
	p.probe = func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, clientURL+"/health", nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /health: %s", resp.Status)
		}
		return nil
	}
	return p, e.startTracked(ctx, p, assign)
}

func (e *Env) apiserverArgs(c *Cluster, s *APIServer) []string {
	args := []string{
		filepath.Join(e.BinDir, "kube-apiserver"),
		"--etcd-servers=" + c.etcdURL(e),
		"--etcd-prefix=" + c.EtcdPrefix,
		"--secure-port=" + strconv.Itoa(s.Port),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--cert-dir=" + filepath.Join(c.dir, "cert-dir"),
		"--tls-cert-file=" + c.serving.CertFile,
		"--tls-private-key-file=" + c.serving.KeyFile,
		"--client-ca-file=" + c.CAFile,
		"--token-auth-file=" + c.tokens,
		"--service-account-key-file=" + c.saKey,
		"--service-account-signing-key-file=" + c.saKey,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--endpoint-reconciler-type=none",
		"--audit-policy-file=" + c.policy,
		"--audit-log-path=" + s.AuditLog,
	}
	if c.hub {
		args = append(args,
			"--requestheader-client-ca-file="+e.pki.frontProxyCA.CertFile,
			"--requestheader-allowed-names=front-proxy-client",
			"--requestheader-username-headers=X-Remote-User",
			"--requestheader-group-headers=X-Remote-Group",
			"--requestheader-uid-headers=X-Remote-Uid",
			"--requestheader-extra-headers-prefix=X-Remote-Extra-",
			"--proxy-client-cert-file="+e.pki.frontProxyClient.CertFile,
			"--proxy-client-key-file="+e.pki.frontProxyClient.KeyFile,
		)
		args = append(args, "--authorization-mode=RBAC")
		args = append(args, e.cfg.HubArgs...)
	} else {
		args = append(args,
			// As a real cluster authorizes its kubelets, so that a node
			// identity through the member door gets what it would directly.
			"--authorization-mode=Node,RBAC",
			"--enable-admission-plugins=NodeRestriction",
			"--kubelet-client-certificate="+e.pki.kubeletClient.CertFile,
			"--kubelet-client-key="+e.pki.kubeletClient.KeyFile,
			"--kubelet-certificate-authority="+e.pki.kubeletCA.CertFile,
			"--kubelet-preferred-address-types=InternalIP",
		)
	}
	return args
}

func (e *Env) startAPIServer(ctx context.Context, c *Cluster, s *APIServer) error {
	p := e.newProcess(s.Name)
	s.Process = p
	if err := os.MkdirAll(filepath.Dir(s.AuditLog), 0o755); err != nil {
		return err
	}
	assign := func() {
		s.Port = mustFreePort()
		s.URL = "https://127.0.0.1:" + strconv.Itoa(s.Port)
		p.Args = e.apiserverArgs(c, s)
	}
	assign()
	p.timeout = apiserverReadyTimeout
	client := httpsClient(c.CAData, nil)
	p.probe = func(ctx context.Context) error {
		return probeReadyz(ctx, client, s.URL, c.Tokens[UserAdmin], nil)
	}
	err := e.startTracked(ctx, p, assign)
	if err == nil && s == c.Servers[0] {
		c.AdminConfig = c.Config(UserAdmin, 0)
	}
	return err
}

func httpsClient(caPEM []byte, cert *tls.Certificate) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	tc := &tls.Config{RootCAs: pool}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
}

func probeReadyz(ctx context.Context, client *http.Client, url, token string, header http.Header) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
	if err != nil {
		return err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		buf := make([]byte, 512)
		n, _ := resp.Body.Read(buf)
		return fmt.Errorf("GET /readyz: %s: %s", resp.Status, strings.TrimSpace(string(buf[:n])))
	}
	return nil
}

func (e *Env) startGateway(ctx context.Context) error {
	door := mustFreePort()
	e.MemberDoorAddress = "127.0.0.1:" + strconv.Itoa(door)
	args := append([]string{"--member-door-port=" + strconv.Itoa(door)}, e.cfg.GatewayArgs...)
	p, url, err := e.startGatewayProcess(ctx, "kube-gateway", args)
	e.Gateway, e.GatewayURL = p, url
	return err
}

// StartExtraGateway starts another kube-gateway on the same etcd data and hub,
// with extra flags, not registered with the hub: tests call it directly (see
// FrontProxyClientCert). Env.Stop stops it too.
func (e *Env) StartExtraGateway(ctx context.Context, name string, args ...string) (p *Process, url string, err error) {
	return e.startGatewayProcess(ctx, name, args)
}

func (e *Env) startGatewayProcess(ctx context.Context, name string, extraArgs []string) (*Process, string, error) {
	p := e.newProcess(name)
	p.Env = e.cfg.GatewayEnv
	var url string
	assign := func() {
		port := mustFreePort()
		url = "https://127.0.0.1:" + strconv.Itoa(port)
		p.Args = append([]string{
			filepath.Join(e.BinDir, "kube-gateway"),
			"--secure-port=" + strconv.Itoa(port),
			"--bind-address=127.0.0.1",
			"--tls-cert-file=" + e.pki.gatewayServing.CertFile,
			"--tls-private-key-file=" + e.pki.gatewayServing.KeyFile,
			"--etcd-servers=" + e.GatewayEtcdURL,
			"--etcd-prefix=/kube-gateway",
			"--kubeconfig=" + e.Kubeconfig("hub-"+UserGateway),
			"--secret-namespace=" + GatewayNamespace,
			"-v=2",
		}, extraArgs...)
	}
	assign()
	p.timeout = gatewayReadyTimeout
	// The gateway trusts X-Remote-* from a client with the front-proxy cert,
	// as the hub's aggregator sends them.
	cert, err := tls.LoadX509KeyPair(e.pki.frontProxyClient.CertFile, e.pki.frontProxyClient.KeyFile)
	if err != nil {
		return p, url, err
	}
	client := httpsClient(e.pki.gatewayCA.CertPEM, &cert)
	hdr := AdminFrontProxyHeader()
	p.probe = func(ctx context.Context) error {
		return probeReadyz(ctx, client, url, "", hdr)
	}
	err = e.startTracked(ctx, p, assign)
	return p, url, err
}
