package harness

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// controllerManagerReadyTimeout bounds the wait for a kube-controller-manager's
// first work (the default ServiceAccount, the aggregated ClusterRoles).
const controllerManagerReadyTimeout = 2 * time.Minute

// controllers are the kube-controller-manager controllers every cluster runs:
// namespaces that finish deleting, default ServiceAccounts, aggregated
// ClusterRoles (admin, edit, view) and cascading deletion. Nothing else, to
// keep start-up short and the idle CPU low (there are no real nodes or
// workloads). The token controller, which fills in long-lived token Secrets,
// is not in the list: it runs whenever a private key is given.
var controllers = []string{
	"namespace-controller",
	"serviceaccount-controller",
	"clusterrole-aggregation-controller",
	"garbage-collector-controller",
}

// startControllerManager starts the cluster's kube-controller-manager as admin
// on its first apiserver and waits until it has created ServiceAccount
// default/default and filled in ClusterRole edit.
func (e *Env) startControllerManager(ctx context.Context, c *Cluster) error {
	p := e.newProcess(c.Name + "-controller-manager")
	c.ControllerManager = p
	p.Args = e.controllerManagerArgs(c, e.Kubeconfig(c.Name+"-admin"))
	p.timeout = controllerManagerReadyTimeout
	cs, err := kubernetes.NewForConfig(c.AdminConfig)
	if err != nil {
		return err
	}
	p.probe = func(ctx context.Context) error {
		if _, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return fmt.Errorf("serviceaccount default/default: %w", err)
		}
		edit, err := cs.RbacV1().ClusterRoles().Get(ctx, "edit", metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("clusterrole edit: %w", err)
		}
		if len(edit.Rules) == 0 {
			return errors.New("clusterrole edit has no rules yet (aggregation pending)")
		}
		return nil
	}
	return e.startTracked(ctx, p, nil)
}

func (e *Env) controllerManagerArgs(c *Cluster, kubeconfig string, extra ...string) []string {
	return append([]string{
		filepath.Join(e.BinDir, "kube-controller-manager"),
		"--kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		// No serving endpoint: readiness is what the controllers did.
		"--secure-port=0",
		"--controllers=" + strings.Join(controllers, ","),
		// The token controller: it signs with the key the apiservers verify
		// tokens with and puts the cluster's CA into token Secrets as ca.crt.
		"--service-account-private-key-file=" + c.saKey,
		"--root-ca-file=" + c.CAFile,
	}, extra...)
}

// StartControllerManager starts another kube-controller-manager for member,
// with the controllers of the cluster's own, as a real cluster runs it: its
// identity from kubeconfig (which may point anywhere, the member door
// included), each controller with a ServiceAccount token of its own
// (--use-service-account-credentials). Stop the cluster's own first: two
// would both act. Env.Stop stops it too.
func (e *Env) StartControllerManager(ctx context.Context, member, name, kubeconfig string) (*Process, error) {
	c := e.Members[member]
	p := e.newProcess(name)
	p.Args = e.controllerManagerArgs(c, kubeconfig, "--use-service-account-credentials=true")
	p.timeout = controllerManagerReadyTimeout
	p.probe = func(context.Context) error { return nil } // the test waits for what it needs done
	return p, e.startTracked(ctx, p, nil)
}
