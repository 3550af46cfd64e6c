package door

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/kubewharf/kube-gateway/proxy/cluster"
)

// The member's own client CA: the client-ca-file its apiservers publish in
// kube-system/extension-apiserver-authentication for aggregated apiservers.
const (
	memberCAPath = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"
	memberCAKey  = "client-ca-file"
	// memberCAInterval is how often it is read again; a CA rotation reaches
	// the door within it.
	memberCAInterval = time.Minute
	// memberCARetry is how often it is tried while it could not be read.
	memberCARetry = 5 * time.Second
)

// memberCA reads a member's client CA for its door.
type memberCA struct {
	cluster   *cluster.Cluster
	secretCAs []byte // the door Secret's ca.crt, trusted too; may be empty
	last      []byte // what was read last
	err       atomic.Pointer[error]
}

func (m *memberCA) lastError() error {
	if m == nil {
		return errors.New("no member CA configured")
	}
	if err := m.err.Load(); err != nil {
		return *err
	}
	return errors.New("not tried yet")
}

// run reads the member's client CA into pool until ctx ends: at once, then
// every memberCAInterval, every memberCARetry while it fails.
func (m *memberCA) run(ctx context.Context, pool *atomic.Pointer[x509.CertPool]) {
	logger := klog.FromContext(ctx).WithValues("upstreamcluster", m.cluster.Name)
	for {
		err := m.read(ctx, pool)
		next := memberCAInterval
		if err != nil {
			m.err.Store(&err)
			next = memberCARetry
			logger.V(2).Info("Cannot read the member's client CA for its door", "err", err.Error())
		}
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (m *memberCA) read(ctx context.Context, pool *atomic.Pointer[x509.CertPool]) error {
	var cm corev1.ConfigMap
	if err := m.cluster.Get(ctx, memberCAPath, &cm); err != nil {
		return err
	}
	ca := []byte(cm.Data[memberCAKey])
	if bytes.Equal(ca, m.last) && pool.Load() != nil {
		return nil
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(ca) {
		return fmt.Errorf("%s of kube-system/extension-apiserver-authentication holds no PEM certificate", memberCAKey)
	}
	p.AppendCertsFromPEM(m.secretCAs)
	m.last = ca
	pool.Store(p)
	return nil
}
