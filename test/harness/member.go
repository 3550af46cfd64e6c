package harness

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// StartMember starts one more member cluster, name, in the running
// environment: one kube-apiserver on an etcd of its own (Cluster.Etcd), so
// that a test can stop or freeze that etcd without touching the other
// clusters, and no controller manager, with the gateway's rights on it, and
// registers it on the hub (Secret and UpstreamCluster name, as the members
// Start registers). It returns once the member answers through the hub and
// the gateway. The caller deletes the UpstreamCluster and the Secret and
// stops the cluster (Cluster.Stop); Env.Stop stops it too.
func (e *Env) StartMember(ctx context.Context, name string) (_ *Cluster, err error) {
	if _, ok := e.Members[name]; ok || name == e.Hub.Name {
		return nil, fmt.Errorf("harness: cluster %s exists", name)
	}
	c, err := e.newCluster(name, 1, false, map[string]string{UserAdmin: "system:masters", UserGateway: ""})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Stop())
		}
	}()
	if c.Etcd, err = e.startEtcdProcess(ctx, name+"-etcd", &c.ownEtcd); err != nil {
		return nil, err
	}
	if err := e.startAPIServer(ctx, c, c.Servers[0]); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	member, err := kubernetes.NewForConfig(c.AdminConfig)
	if err != nil {
		return nil, err
	}
	for _, step := range gatewayRights(sctx, objects{member}) {
		if err := step(); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	cs, err := kubernetes.NewForConfig(e.Hub.AdminConfig)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(e.Hub.AdminConfig)
	if err != nil {
		return nil, err
	}
	if err := ensure(sctx, "secret "+GatewayNamespace+"/"+name, func(ctx context.Context) error {
		_, err := cs.CoreV1().Secrets(GatewayNamespace).Create(ctx, memberSecret(c), metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	if err := ensure(sctx, "upstreamcluster "+name, func(ctx context.Context) error {
		_, err := dyn.Resource(UpstreamClusterGVR).Create(ctx, upstreamCluster(c), metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, err
	}
	return c, waitProxied(ctx, cs, name, nil, nil)
}

// etcdURL is the etcd of the cluster's apiservers: its own, else the
// environment's.
func (c *Cluster) etcdURL(e *Env) string {
	if c.ownEtcd != "" {
		return c.ownEtcd
	}
	return e.EtcdURL
}

// Stop stops the apiservers of a cluster of StartMember, then its etcd.
func (c *Cluster) Stop() error {
	var errs []error
	for _, s := range c.Servers {
		if s.Process != nil {
			errs = append(errs, s.Process.Stop())
		}
	}
	if c.Etcd != nil {
		errs = append(errs, c.Etcd.Stop())
	}
	return errors.Join(errs...)
}

// memberSecret is the hub Secret with the gateway's credential toward member
// c (Secret <name> in the gateway namespace).
func memberSecret(c *Cluster) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: c.Name},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{"token": []byte(c.Tokens[UserGateway]), "ca.crt": c.CAData},
	}
}

// upstreamCluster is UpstreamCluster <name> for member c: its servers, the
// credential of memberSecret.
func upstreamCluster(c *Cluster) *unstructured.Unstructured {
	var servers []any
	for _, s := range c.Servers {
		servers = append(servers, map[string]any{"endpoint": s.URL})
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": UpstreamClusterGVR.GroupVersion().String(),
		"kind":       "UpstreamCluster",
		"metadata":   map[string]any{"name": c.Name},
		"spec": map[string]any{
			"servers":      servers,
			"clientConfig": map[string]any{"secretRef": map[string]any{"namespace": GatewayNamespace, "name": c.Name}},
		},
	}}
}
