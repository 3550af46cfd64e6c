package harness

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"
)

// ensure runs create until it succeeds or reports AlreadyExists, retrying
// transient errors (a namespace or bootstrap role not there yet) until ctx ends.
func ensure(ctx context.Context, what string, create func(context.Context) error) error {
	var last error
	for {
		err := create(ctx)
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
			return fmt.Errorf("create %s: %w", what, err)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("create %s: %w (last error: %v)", what, ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// poll calls cond every 250 ms until it returns true, an error, or the
// timeout passes; describe explains the last state in the timeout error.
func poll(ctx context.Context, timeout time.Duration, cond func(context.Context) (bool, error), describe func() string) error {
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, cond)
	if wait.Interrupted(err) {
		return fmt.Errorf("timed out after %s: %s", timeout, describe())
	}
	return err
}

type objects struct {
	cs *kubernetes.Clientset
}

// namespace creates namespace name and waits for its ServiceAccount "default"
// (from the controller manager), which pod admission wants.
func (o objects) namespace(ctx context.Context, name string) error {
	if err := ensure(ctx, "namespace "+name, func(ctx context.Context) error {
		_, err := o.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return err
	}
	state := "not read yet"
	return poll(ctx, setupTimeout, func(ctx context.Context) (bool, error) {
		_, err := o.cs.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			state = err.Error()
			return false, nil
		}
		return true, nil
	}, func() string { return "serviceaccount " + name + "/default: " + state })
}

func (o objects) clusterRole(ctx context.Context, name string, rules ...rbacv1.PolicyRule) error {
	return ensure(ctx, "clusterrole "+name, func(ctx context.Context) error {
		_, err := o.cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})
		return err
	})
}

func (o objects) role(ctx context.Context, ns, name string, rules ...rbacv1.PolicyRule) error {
	return ensure(ctx, "role "+ns+"/"+name, func(ctx context.Context) error {
		_, err := o.cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})
		return err
	})
}

func userSubject(user string) []rbacv1.Subject {
	return []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
}

func (o objects) clusterRoleBinding(ctx context.Context, name, clusterRole, user string) error {
	return ensure(ctx, "clusterrolebinding "+name, func(ctx context.Context) error {
		_, err := o.cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
			Subjects:   userSubject(user),
		}, metav1.CreateOptions{})
		return err
	})
}

// roleBinding binds user in ns to a Role or ClusterRole (kind).
func (o objects) roleBinding(ctx context.Context, ns, name, kind, role, user string) error {
	return ensure(ctx, "rolebinding "+ns+"/"+name, func(ctx context.Context) error {
		_, err := o.cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: role},
			Subjects:   userSubject(user),
		}, metav1.CreateOptions{})
		return err
	})
}

var readVerbs = []string{"get", "list", "watch"}

// setupHub creates what the gateway needs on the hub (before it starts), the
// member Secrets, and alice's right to use the proxy.
func (e *Env) setupHub(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(e.Hub.AdminConfig)
	if err != nil {
		return err
	}
	o := objects{cs}
	steps := []func() error{
		func() error { return o.namespace(ctx, GatewayNamespace) },
		// Delegated authentication and authorization (TokenReview,
		// SubjectAccessReview) and the requestheader / client-ca ConfigMap.
		func() error {
			return o.clusterRoleBinding(ctx, "kube-gateway:system:auth-delegator", "system:auth-delegator", UserGateway)
		},
		func() error {
			return o.roleBinding(ctx, "kube-system", "kube-gateway:extension-apiserver-authentication-reader", "Role", "extension-apiserver-authentication-reader", UserGateway)
		},
		// The standard admission chain (NamespaceLifecycle, webhooks,
		// ValidatingAdmissionPolicy, MutatingAdmissionPolicy) watches these.
		func() error {
			return o.clusterRole(ctx, "kube-gateway:hub-reader",
				rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: readVerbs},
				rbacv1.PolicyRule{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"*"}, Verbs: readVerbs},
			)
		},
		func() error {
			return o.clusterRoleBinding(ctx, "kube-gateway:hub-reader", "kube-gateway:hub-reader", UserGateway)
		},
		// The member credentials.
		func() error {
			return o.role(ctx, GatewayNamespace, "kube-gateway:secrets-reader",
				rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: readVerbs})
		},
		func() error {
			return o.roleBinding(ctx, GatewayNamespace, "kube-gateway:secrets-reader", "Role", "kube-gateway:secrets-reader", UserGateway)
		},
		// Leader election of the replica that writes UpstreamCluster status
		// (Lease kube-gateway-status in the gateway namespace), and one Lease
		// per replica, listed and watched to divide flow-control limits among
		// the replicas and deleted when a replica stops, as the chart grants.
		func() error {
			verbs := []string{"get", "list", "watch", "create", "update", "delete"}
			if e.cfg.StatusLeaseOnly {
				verbs = []string{"get", "create", "update"}
			}
			return o.role(ctx, GatewayNamespace, "kube-gateway:leader-election",
				rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: verbs})
		},
		func() error {
			return o.roleBinding(ctx, GatewayNamespace, "kube-gateway:leader-election", "Role", "kube-gateway:leader-election", UserGateway)
		},
		// Events about UpstreamClusters, recorded by the status writer. They
		// are cluster-scoped, so their Events go to namespace default.
		func() error {
			return o.role(ctx, "default", "kube-gateway:events",
				rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}})
		},
		func() error {
			return o.roleBinding(ctx, "default", "kube-gateway:events", "Role", "kube-gateway:events", UserGateway)
		},
		// Users of the proxy: alice yes, bob no.
		func() error {
			return o.clusterRole(ctx, "kube-gateway:proxy",
				rbacv1.PolicyRule{APIGroups: []string{UpstreamClusterGVR.Group}, Resources: []string{"upstreamclusters/proxy"}, Verbs: []string{"*"}},
				rbacv1.PolicyRule{APIGroups: []string{UpstreamClusterGVR.Group}, Resources: []string{"upstreamclusters", "cachedresources"}, Verbs: readVerbs},
			)
		},
		func() error {
			return o.clusterRoleBinding(ctx, "kube-gateway:proxy:alice", "kube-gateway:proxy", UserAlice)
		},
	}
	for _, m := range []string{MemberA, MemberB} {
		c := e.Members[m]
		steps = append(steps, func() error {
			return ensure(ctx, "secret "+GatewayNamespace+"/"+m, func(ctx context.Context) error {
				_, err := cs.CoreV1().Secrets(GatewayNamespace).Create(ctx, memberSecret(c), metav1.CreateOptions{})
				return err
			})
		})
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("hub: %w", err)
		}
	}
	return nil
}

// gatewayRights are the steps that give the gateway's identity on a member
// what it needs there: impersonation, and the member door's reviews and
// client CA.
func gatewayRights(ctx context.Context, o objects) []func() error {
	return []func() error{
		func() error {
			return o.clusterRole(ctx, "kube-gateway:impersonator",
				rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"users", "groups", "serviceaccounts"}, Verbs: []string{"impersonate"}},
				// uids and userextras/<key>: RBAC has no "userextras/*"
				// wildcard (only "*" and "*/subresource"), so the whole group.
				rbacv1.PolicyRule{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"impersonate"}},
				// The member door's TokenReviews and SubjectAccessReviews.
				rbacv1.PolicyRule{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
				rbacv1.PolicyRule{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
			)
		},
		func() error {
			return o.clusterRoleBinding(ctx, "kube-gateway:impersonator", "kube-gateway:impersonator", UserGateway)
		},
		// The member's client CA, for a member door with clientCA Member.
		func() error {
			return o.roleBinding(ctx, "kube-system", "kube-gateway:authentication-reader", "Role", "extension-apiserver-authentication-reader", UserGateway)
		},
	}
}

// setupMember creates the gateway's impersonation rights, namespace alice
// and, on member-a, alice's edit binding, Node "stand-in" and Pod alice/shell.
func (e *Env) setupMember(ctx context.Context, c *Cluster) error {
	cs, err := kubernetes.NewForConfig(c.AdminConfig)
	if err != nil {
		return err
	}
	o := objects{cs}
	steps := append(gatewayRights(ctx, o), func() error { return o.namespace(ctx, AliceNamespace) })
	if c.Name == MemberA {
		steps = append(steps,
			func() error {
				return o.roleBinding(ctx, AliceNamespace, "alice:edit", "ClusterRole", "edit", UserAlice)
			},
			func() error { return e.standInNode(ctx, cs) },
			func() error { return standInPod(ctx, cs) },
		)
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("%s: %w", c.Name, err)
		}
	}
	return nil
}

// standInNode creates Node "stand-in" and points its status at the stand-in
// kubelet (InternalIP 127.0.0.1, kubeletEndpoint port, Ready).
func (e *Env) standInNode(ctx context.Context, cs *kubernetes.Clientset) error {
	if err := ensure(ctx, "node "+StandInNode, func(ctx context.Context) error {
		_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:   StandInNode,
			Labels: map[string]string{"kubernetes.io/hostname": StandInNode, "kubernetes.io/os": "linux"},
		}}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return err
	}
	now := metav1.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := cs.CoreV1().Nodes().Get(ctx, StandInNode, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
		node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(e.Kubelet.Port)
		node.Status.Capacity = capacity
		node.Status.Allocatable = capacity
		node.Status.Conditions = []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "stand-in kubelet", LastHeartbeatTime: now, LastTransitionTime: now,
		}}
		node.Status.NodeInfo = corev1.NodeSystemInfo{OperatingSystem: "linux", Architecture: "amd64", KubeletVersion: "stand-in"}
		_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
}

// standInPod creates Pod alice/shell on Node "stand-in" and marks it Running.
func standInPod(ctx context.Context, cs *kubernetes.Clientset) error {
	no, zero := false, int64(0)
	if err := ensure(ctx, "pod "+AliceNamespace+"/"+ShellPod, func(ctx context.Context) error {
		_, err := cs.CoreV1().Pods(AliceNamespace).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: ShellPod, Labels: map[string]string{"app": ShellPod}},
			Spec: corev1.PodSpec{
				NodeName:                      StandInNode,
				AutomountServiceAccountToken:  &no,
				TerminationGracePeriodSeconds: &zero,
				Containers:                    []corev1.Container{{Name: "main", Image: "stand-in"}},
			},
		}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return err
	}
	now := metav1.Now()
	yes := true
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := cs.CoreV1().Pods(AliceNamespace).Get(ctx, ShellPod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pod.Status.Phase = corev1.PodRunning
		pod.Status.HostIP = "127.0.0.1"
		pod.Status.HostIPs = []corev1.HostIP{{IP: "127.0.0.1"}}
		pod.Status.PodIP = "127.0.0.1"
		pod.Status.PodIPs = []corev1.PodIP{{IP: "127.0.0.1"}}
		pod.Status.StartTime = &now
		pod.Status.Conditions = nil
		for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
			pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
		}
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
			Name: "main", Ready: true, Started: &yes,
			Image: "stand-in", ImageID: "stand-in", ContainerID: "stand-in://main",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		}}
		_, err = cs.CoreV1().Pods(AliceNamespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
}

var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// APIServiceName is the hub APIService that serves the gateway.
const APIServiceName = "v1alpha1.gateway.kubewharf.io"

// registerGateway creates the ExternalName Service and the APIService on the
// hub and waits until the APIService is Available.
func (e *Env) registerGateway(ctx context.Context) error {
	cs, dyn, err := e.hubClients()
	if err != nil {
		return err
	}
	port := int64(portOf(e.GatewayURL))
	if err := ensure(ctx, "service "+GatewayNamespace+"/"+GatewayService, func(ctx context.Context) error {
		_, err := cs.CoreV1().Services(GatewayNamespace).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: GatewayService},
			Spec: corev1.ServiceSpec{
				Type:         corev1.ServiceTypeExternalName,
				ExternalName: "localhost",
				Ports:        []corev1.ServicePort{{Name: "https", Protocol: corev1.ProtocolTCP, Port: int32(port)}},
			},
		}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return err
	}
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": APIServiceName},
		"spec": map[string]any{
			"group":                UpstreamClusterGVR.Group,
			"version":              UpstreamClusterGVR.Version,
			"service":              map[string]any{"namespace": GatewayNamespace, "name": GatewayService, "port": port},
			"caBundle":             e.pki.gatewayCA.CertPEM, // []byte: base64 in JSON
			"groupPriorityMinimum": int64(1000),
			"versionPriority":      int64(15),
		},
	}}
	if err := ensure(ctx, "apiservice "+APIServiceName, func(ctx context.Context) error {
		_, err := dyn.Resource(apiServiceGVR).Create(ctx, apiService, metav1.CreateOptions{})
		return err
	}); err != nil {
		return err
	}
	state := "not read yet"
	return poll(ctx, apiServiceTimeout, func(ctx context.Context) (bool, error) {
		if !e.Gateway.Running() {
			return false, fmt.Errorf("kube-gateway exited; its log ends with:\n%s", e.Gateway.runTail(40))
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		obj, err := dyn.Resource(apiServiceGVR).Get(rctx, APIServiceName, metav1.GetOptions{})
		if err != nil {
			state = err.Error()
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Available" {
				state = fmt.Sprintf("Available=%v reason=%v message=%v", m["status"], m["reason"], m["message"])
				return m["status"] == "True", nil
			}
		}
		state = "no Available condition"
		return false, nil
	}, func() string {
		return "APIService " + APIServiceName + ": " + state + "; kube-gateway log ends with:\n" + e.Gateway.runTail(30)
	})
}

// createUpstreamClusters creates an UpstreamCluster per member and waits
// until the hub proxies /version of member-a as admin.
func (e *Env) createUpstreamClusters(ctx context.Context) error {
	dyn, err := dynamic.NewForConfig(e.Hub.AdminConfig)
	if err != nil {
		return err
	}
	for _, m := range []string{MemberA, MemberB} {
		uc := upstreamCluster(e.Members[m])
		if err := ensure(ctx, "upstreamcluster "+m, func(ctx context.Context) error {
			_, err := dyn.Resource(UpstreamClusterGVR).Create(ctx, uc, metav1.CreateOptions{})
			return err
		}); err != nil {
			return err
		}
	}
	cs, err := kubernetes.NewForConfig(e.Hub.AdminConfig)
	if err != nil {
		return err
	}
	return waitProxied(ctx, cs, MemberA, func() error {
		if !e.Gateway.Running() {
			return fmt.Errorf("kube-gateway exited; its log ends with:\n%s", e.Gateway.runTail(40))
		}
		return nil
	}, func() string { return "; kube-gateway log ends with:\n" + e.Gateway.runTail(30) })
}

func portOf(url string) int {
	i := strings.LastIndexByte(url, ':')
	var p int
	fmt.Sscanf(url[i+1:], "%d", &p)
	return p
}

// waitProxied waits until GET /version of cluster's proxy path through the hub
// answers 200. alive, if not nil, ends the wait with its error (a process that
// exited); more adds to the last answer in the timeout's message.
func waitProxied(ctx context.Context, cs kubernetes.Interface, cluster string, alive func() error, more func() string) error {
	state := "no answer yet"
	path := ProxyPath(cluster) + "/version"
	return poll(ctx, proxyReadyTimeout, func(ctx context.Context) (bool, error) {
		if alive != nil {
			if err := alive(); err != nil {
				return false, err
			}
		}
		var code int
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		body, err := cs.Discovery().RESTClient().Get().AbsPath(path).Do(rctx).StatusCode(&code).Raw()
		if err == nil && code == http.StatusOK {
			return true, nil
		}
		if ctx.Err() != nil {
			return false, nil // keep the last complete answer in state
		}
		state = fmt.Sprintf("GET %s: %d %v %s", path, code, err, strings.TrimSpace(string(body)))
		return false, nil
	}, func() string {
		if more != nil {
			return state + more()
		}
		return state
	})
}

// MemberDoorDomain is the domain of the member doors' server names that
// Config.MemberDoors opens: <member>.gateway.test (a reserved domain: the
// kubeconfigs name it as their tls-server-name and dial the door's address).
const MemberDoorDomain = ".gateway.test"

// DoorKubeconfig names the kubeconfig of member's admin through its door.
func DoorKubeconfig(member string) string { return member + "-admin@gateway" }

// openMemberDoors gives each member's UpstreamCluster a member door: a
// Secret with a serving certificate for <member>.gateway.test from the
// gateway's CA and the member's client CA, spec.secureServing naming both;
// then writes the member admins' kubeconfigs through the doors.
func (e *Env) openMemberDoors(ctx context.Context) error {
	cs, dyn, err := e.hubClients()
	if err != nil {
		return err
	}
	for _, m := range []string{MemberA, MemberB} {
		c := e.Members[m]
		name := m + MemberDoorDomain
		serving, err := e.pki.gatewayCA.issue(c.dir, "door-serving", certSpec{CommonName: name, SANs: []string{name}, Server: true})
		if err != nil {
			return err
		}
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: m + "-door", Namespace: GatewayNamespace},
			Data: map[string][]byte{"tls.crt": serving.CertPEM, "tls.key": serving.KeyPEM, "ca.crt": c.CAData}}
		if err := ensure(ctx, "secret "+secret.Name, func(ctx context.Context) error {
			_, err := cs.CoreV1().Secrets(GatewayNamespace).Create(ctx, secret, metav1.CreateOptions{})
			return err
		}); err != nil {
			return err
		}
		patch := fmt.Sprintf(`{"spec":{"secureServing":{"serverNames":[%q],"secretRef":{"namespace":%q,"name":%q}}}}`, name, GatewayNamespace, secret.Name)
		if _, err := dyn.Resource(UpstreamClusterGVR).Patch(ctx, m, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return err
		}
		certPEM, keyPEM, err := c.ClientCertificate(UserAdmin, "system:masters")
		if err != nil {
			return err
		}
		cfg := clientcmdapi.NewConfig()
		n := DoorKubeconfig(m)
		cfg.Clusters[n] = &clientcmdapi.Cluster{Server: "https://" + e.MemberDoorAddress, TLSServerName: name, CertificateAuthorityData: e.pki.gatewayCA.CertPEM}
		cfg.AuthInfos[n] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
		cfg.Contexts[n] = &clientcmdapi.Context{Cluster: n, AuthInfo: n}
		cfg.CurrentContext = n
		if err := clientcmd.WriteToFile(*cfg, e.Kubeconfig(n)); err != nil {
			return err
		}
		// The door serves once the gateway has compiled it.
		rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
		if err != nil {
			return err
		}
		client, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return err
		}
		var last error
		if err := poll(ctx, proxyReadyTimeout, func(ctx context.Context) (bool, error) {
			_, last = client.Discovery().ServerVersion()
			return last == nil, nil
		}, func() string { return fmt.Sprintf("%s's door does not answer: %v", m, last) }); err != nil {
			return err
		}
	}
	return e.writeMergedKubeconfig()
}

// hubClients are the hub admin's typed and dynamic clients.
func (e *Env) hubClients() (kubernetes.Interface, dynamic.Interface, error) {
	cs, err := kubernetes.NewForConfig(e.Hub.AdminConfig)
	if err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(e.Hub.AdminConfig)
	return cs, dyn, err
}
