package e2e

import (
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/util/retry"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// describedEvent is one line of the Events section of kubectl describe.
type describedEvent struct {
	typ, reason, from, message string
}

// describeEvents runs kubectl describe upstreamcluster name as the hub admin
// and returns the Events it shows.
func describeEvents(ctx context.Context, name string) ([]describedEvent, string, error) {
	out, _, err := env.Kubectl(ctx, "hub-admin", "describe", "upstreamcluster", name)
	if err != nil {
		return nil, out, err
	}
	_, section, ok := strings.Cut(out, "\nEvents:")
	if !ok {
		return nil, out, errorf("no Events section in kubectl describe:\n%s", out)
	}
	var events []describedEvent
	for _, line := range strings.Split(section, "\n") {
		// "  Warning  SecretNotFound  5s  kube-gateway  the cluster cannot be used: ..."
		f := strings.Fields(line)
		if len(f) < 5 || (f[0] != corev1.EventTypeNormal && f[0] != corev1.EventTypeWarning) {
			continue
		}
		// Age may be "5s" or "12s (x2 over 20s)".
		i := 3
		if strings.HasPrefix(f[i], "(x") {
			i += 3
		}
		if i+1 >= len(f) {
			continue
		}
		events = append(events, describedEvent{typ: f[0], reason: f[1], from: f[i], message: strings.Join(f[i+1:], " ")})
	}
	return events, out, nil
}

// waitDescribed waits until kubectl describe shows an Event of type and reason
// whose message contains message.
func waitDescribed(t *testing.T, name, typ, reason, message string) {
	t.Helper()
	var last error
	eventually(t, 90*time.Second, func(ctx context.Context) error {
		events, out, err := describeEvents(ctx, name)
		if err != nil {
			if ctx.Err() != nil && last != nil {
				return last // cut by the deadline: report what was last seen
			}
			return err
		}
		for _, e := range events {
			if e.typ == typ && e.reason == reason && strings.Contains(e.message, message) {
				if e.from != "kube-gateway" {
					return errorf("event %+v is not from kube-gateway", e)
				}
				return nil
			}
		}
		last = errorf("kubectl describe shows no %s %s event with %q:\n%s", typ, reason, message, out)
		return last
	})
}

// forwarder is a TCP relay on a fixed loopback port toward a member server: a
// server that can be switched on and off (TLS passes through unchanged).
type forwarder struct {
	addr, target string
	mu           sync.Mutex
	l            net.Listener
	conns        []net.Conn
	wg           sync.WaitGroup
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

func (f *forwarder) start(t *testing.T) {
	t.Helper()
	l, err := net.Listen("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.l = l
	f.mu.Unlock()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", f.target)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, up)
			f.mu.Unlock()
			f.wg.Add(2)
			go func() { defer f.wg.Done(); _, _ = io.Copy(up, c); up.Close() }()
			go func() { defer f.wg.Done(); _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
}

func (f *forwarder) stop() {
	f.mu.Lock()
	if f.l != nil {
		f.l.Close()
	}
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
	f.mu.Unlock()
	f.wg.Wait()
}

// kubectl describe upstreamcluster shows Events for configuration problems and
// health transitions, recorded once by the status leader although two gateway
// replicas run; insecure: true is reported in a condition and a Warning Event;
// no Event repeats the gateway's credential.
func TestEventsOnUpstreamClusters(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	// A second replica observes the same clusters: only the leader records.
	replica, _, err := env.StartExtraGateway(ctx, "kube-gateway-replica")
	t.Cleanup(func() { _ = replica.Stop() })
	if err != nil {
		t.Fatal(err)
	}

	member := env.Members[harness.MemberB].Servers[0]
	relay := &forwarder{addr: "127.0.0.1:" + freePort(t), target: "127.0.0.1:" + strconv.Itoa(member.Port)}
	t.Cleanup(relay.stop)
	endpoint := "https://" + relay.addr

	// 1. The credential Secret does not exist yet.
	const name, secretName = "observed", "observed-cred"
	uc := newCluster(name, endpoint)
	uc.Spec.ClientConfig.SecretRef.Name = secretName
	uc.Spec.ClientConfig.CAData = env.Members[harness.MemberB].CAData
	uc.Spec.HealthCheck = fastHealthCheck
	created := createCluster(t, uc)
	waitDescribed(t, name, corev1.EventTypeWarning, "SecretNotFound", "credential Secret kube-gateway/observed-cred was not found")
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		uc, err := upstreamClusters(t).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		r := meta.FindStatusCondition(uc.Status.Conditions, gatewayv1alpha1.ConditionReady)
		if r == nil || r.Status != metav1.ConditionFalse || r.Reason != "SecretNotFound" {
			return errorf("Ready: %+v, want False SecretNotFound", r)
		}
		return nil
	})

	// 2. With the Secret the cluster compiles, but nothing listens at its
	// server: it turns unhealthy and the cluster not ready.
	token := env.Members[harness.MemberB].Tokens[harness.UserGateway]
	hub := hubAdmin(t)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: harness.GatewayNamespace},
		Data: map[string][]byte{"token": []byte(token)}}
	if _, err := hub.CoreV1().Secrets(harness.GatewayNamespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = hub.CoreV1().Secrets(harness.GatewayNamespace).Delete(context.Background(), secretName, metav1.DeleteOptions{})
	})
	waitDescribed(t, name, corev1.EventTypeWarning, "EndpointUnhealthy", "server "+endpoint+" is unhealthy")
	waitDescribed(t, name, corev1.EventTypeWarning, "ClusterNotReady", "no server can serve requests: 0 of 1 servers healthy")

	// 3. The server comes up: healthy again, the cluster ready.
	relay.start(t)
	waitDescribed(t, name, corev1.EventTypeNormal, "EndpointHealthy", "server "+endpoint+" is healthy again")
	waitDescribed(t, name, corev1.EventTypeNormal, "ClusterReady", "the cluster serves requests again: 1 of 1 servers healthy")

	// 4. insecure: true is allowed, reported in a condition naming the server
	// and in a Warning Event; requests still work.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := upstreamClusters(t).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Spec.ClientConfig.CAData = nil
		cur.Spec.ClientConfig.Insecure = true
		_, err = upstreamClusters(t).Update(ctx, cur, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waitDescribed(t, name, corev1.EventTypeWarning, "InsecureTransport", "certificates of "+endpoint+" are not verified")
	eventually(t, 30*time.Second, func(ctx context.Context) error {
		uc, err := upstreamClusters(t).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := uc.Status
		c := meta.FindStatusCondition(st.Conditions, gatewayv1alpha1.ConditionInsecureTransport)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != "InsecureSkipVerify" || !strings.Contains(c.Message, endpoint) {
			return errorf("InsecureTransport: %+v, want True naming %s", c, endpoint)
		}
		return nil
	})
	waitUsable(t, name)

	// The Events as stored: in namespace default, about this very object, one
	// per transition (a second recorder would have added a copy of each), and
	// none carries the credential.
	list, err := hub.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
		"involvedObject.kind": "UpstreamCluster", "involvedObject.name": name}.String()})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, e := range list.Items {
		want := corev1.ObjectReference{APIVersion: "gateway.kubewharf.io/v1alpha1", Kind: "UpstreamCluster", Name: name, UID: created.UID}
		if e.Namespace != metav1.NamespaceDefault || e.InvolvedObject.APIVersion != want.APIVersion || e.InvolvedObject.UID != want.UID {
			t.Errorf("event %s/%s about %+v, want namespace default and %+v", e.Namespace, e.Name, e.InvolvedObject, want)
		}
		if strings.Contains(e.Message, token) {
			t.Errorf("event %s reveals the gateway's token", e.Reason)
		}
		seen[e.Reason+": "+e.Message]++
	}
	for what, n := range seen {
		if n > 1 {
			t.Errorf("%d Event objects for %q: recorded by more than one replica", n, what)
		}
	}
	t.Logf("%d Events: %v", len(list.Items), seen)
}
