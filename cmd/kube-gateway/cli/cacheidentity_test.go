package cli

import (
	"bytes"
	"context"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	gatewayfake "github.com/kubewharf/kube-gateway/apis/client/clientset/versioned/fake"
	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

func TestParseCacheResources(t *testing.T) {
	for _, c := range []struct {
		flag    []string
		want    []schema.GroupResource
		wantErr string
	}{
		{flag: nil, want: nil},
		{flag: []string{"configmaps"}, want: []schema.GroupResource{{Resource: "configmaps"}}},
		{flag: []string{"configmaps", "deployments.apps", "widgets.example.com"},
			want: []schema.GroupResource{{Resource: "configmaps"}, {Group: "apps", Resource: "deployments"}, {Group: "example.com", Resource: "widgets"}}},
		// Only the core group's secrets are refused: a resource of that
		// name in another group is not the member's credentials.
		{flag: []string{"secrets.example.com"}, want: []schema.GroupResource{{Group: "example.com", Resource: "secrets"}}},
		{flag: []string{"configmaps", "secrets"}, wantErr: `--cache-resources "secrets": secrets are never cached`},
		{flag: []string{"pods/log"}, wantErr: `"pods/log" is a subresource: subresources are never cached`},
		{flag: []string{"deployments.apps/status"}, wantErr: `"deployments/status" is a subresource`},
		{flag: []string{"*"}, wantErr: "never a wildcard"},
		{flag: []string{"*.apps"}, wantErr: "never a wildcard"},
		{flag: []string{"deployments.*"}, wantErr: "never a wildcard"},
		{flag: []string{"configmaps", ""}, wantErr: "--cache-resources has an empty entry"},
		{flag: []string{"ConfigMaps"}, wantErr: "must be the resource's lower-case plural name as in its URL"},
		{flag: []string{"deployments.Apps"}, wantErr: `the API group "Apps" after the first dot`},
		{flag: []string{"configmaps", "deployments.apps", "configmaps"}, wantErr: `--cache-resources "configmaps" given twice`},
	} {
		got, err := parseCacheResources(c.flag)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%q: error %v, want one containing %q", c.flag, err, c.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: %v, %v; want %v", c.flag, got, err, c.want)
		}
	}
}

// The cache identity's role: get, list and watch on exactly the resources
// given, one rule per group, the same whatever their order.
func TestCacheClusterRole(t *testing.T) {
	m := memberIdentity{name: "kube-gateway", namespace: "kube-system"}
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps", "pods"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments", "statefulsets"}, Verbs: []string{"get", "list", "watch"}},
	}
	for _, flag := range [][]string{
		{"configmaps", "pods", "deployments.apps", "statefulsets.apps"},
		{"statefulsets.apps", "pods", "deployments.apps", "configmaps"},
	} {
		resources, err := parseCacheResources(flag)
		if err != nil {
			t.Fatal(err)
		}
		role := typed[rbacv1.ClusterRole](t, m.cacheClusterRole(resources))
		if role.Name != "kube-gateway:cache-reader" || !reflect.DeepEqual(role.Rules, want) {
			t.Errorf("%q: clusterrole %s %+v, want kube-gateway:cache-reader %+v", flag, role.Name, role.Rules, want)
		}
	}
	b := typed[rbacv1.ClusterRoleBinding](t, m.cacheClusterRoleBinding())
	wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "kube-gateway-cache", Namespace: "kube-system"}}
	if b.Name != "kube-gateway:cache-reader" || b.RoleRef.Name != "kube-gateway:cache-reader" || !reflect.DeepEqual(b.Subjects, wantSubjects) {
		t.Errorf("clusterrolebinding %s to %s for %+v", b.Name, b.RoleRef.Name, b.Subjects)
	}
}

// A resource the member does not serve, or not with list and watch, is
// refused before anything is written; a singular or short name gets its
// plural.
func TestCheckServed(t *testing.T) {
	d := &fakediscovery.FakeDiscovery{Fake: &fake.NewClientset().Fake}
	d.Resources = []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "configmaps", SingularName: "configmap", ShortNames: []string{"cm"}, Verbs: []string{"get", "list", "watch", "create"}},
			{Name: "pods", SingularName: "pod", ShortNames: []string{"po"}, Verbs: []string{"get", "list", "watch"}},
			{Name: "pods/log", Verbs: []string{"get"}},
		}},
		{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
			{Name: "deployments", SingularName: "deployment", ShortNames: []string{"deploy"}, Verbs: []string{"get", "list", "watch"}},
		}},
		{GroupVersion: "authentication.k8s.io/v1", APIResources: []metav1.APIResource{
			{Name: "tokenreviews", SingularName: "tokenreview", Verbs: []string{"create"}},
		}},
	}
	for _, c := range []struct {
		flag    []string
		wantErr string
	}{
		{[]string{"configmaps", "pods", "deployments.apps"}, ""},
		{[]string{"cm"}, "cm: name the resource by its plural as in its URL: configmaps"},
		{[]string{"deployment.apps"}, "deployment.apps: name the resource by its plural as in its URL: deployments.apps"},
		{[]string{"tokenreviews.authentication.k8s.io"}, "the member serves it without list and watch"},
		{[]string{"widgets.example.com"}, `the member does not serve API group "example.com"`},
		{[]string{"widgets"}, "widgets: the member has no such resource"},
		{[]string{"deployments"}, "deployments: the member has no such resource"}, // not in the core group
	} {
		resources, err := parseCacheResources(c.flag)
		if err != nil {
			t.Fatal(err)
		}
		err = checkServed(d, resources)
		if c.wantErr == "" {
			if err != nil {
				t.Errorf("%q: %v", c.flag, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%q: error %v, want one containing %q", c.flag, err, c.wantErr)
		}
	}
}

// A --cache-resources join refuses is refused before any request, to the
// hub or the member.
func TestJoinRefusesCacheResourcesFirst(t *testing.T) {
	closed := httptest.NewServer(nil)
	closed.Close()
	hub := kubernetes.NewForConfigOrDie(&rest.Config{Host: closed.URL})
	member := fake.NewClientset()
	o := &joinOptions{clusterOptions: newClusterOptions(), tokenExpiration: time.Hour, cacheResources: []string{"configmaps", "secrets"}}
	o.name, o.secretNamespace = "member-a", "kube-gateway"
	o.identity = memberIdentity{name: "kube-gateway", namespace: "kube-system"}
	cs := &clients{hub: hub, member: member,
		memberConfig: &rest.Config{Host: "https://member.example:6443", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("CA")}}}
	err := o.join(context.Background(), cs, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "secrets are never cached") {
		t.Fatalf("error %v, want secrets refused", err)
	}
	if a := member.Actions(); len(a) > 0 {
		t.Errorf("join sent %d requests to the member", len(a))
	}
}

// The cache identity is applied with join's field manager, a new list of
// resources changes its role, and deleteCacheIdentity removes what join
// wrote, hub Secret included, and keeps a role another binding uses.
func TestCacheIdentityLifecycle(t *testing.T) {
	ctx := context.Background()
	member, hub := fake.NewClientset(), fake.NewClientset()
	cs := &clients{member: member, hub: hub}
	o := &joinOptions{clusterOptions: newClusterOptions()}
	o.name, o.secretNamespace = "member-a", "kube-gateway"
	o.identity = memberIdentity{name: "kube-gateway", namespace: "kube-system"}
	m := o.identity
	var out bytes.Buffer
	r := &reporter{out: &out}
	apply := metav1.ApplyOptions{FieldManager: joinFieldManager}

	for _, flag := range [][]string{{"configmaps"}, {"configmaps", "deployments.apps"}} {
		resources, err := parseCacheResources(flag)
		if err != nil {
			t.Fatal(err)
		}
		if err := applyCacheIdentity(ctx, cs, r, m, resources, apply); err != nil {
			t.Fatal(err)
		}
		role, err := member.RbacV1().ClusterRoles().Get(ctx, "kube-gateway:cache-reader", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(role.Rules) != len(flag) {
			t.Errorf("%q: rules %+v", flag, role.Rules)
		}
	}
	if _, err := member.CoreV1().ServiceAccounts("kube-system").Get(ctx, "kube-gateway-cache", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := hub.CoreV1().Secrets("kube-gateway").Apply(ctx, hubSecret("member-a-cache", "kube-gateway", []byte("T"), []byte("CA"), nil), apply); err != nil {
		t.Fatal(err)
	}
	// Another tool's binding to the role: the role stays.
	other := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "someone-reads"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kube-gateway:cache-reader"}}
	if _, err := member.RbacV1().ClusterRoleBindings().Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := o.deleteCacheIdentity(ctx, cs, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"hub: secret/kube-gateway/member-a-cache deleted",
		"member: clusterrolebinding/kube-gateway:cache-reader deleted",
		"member: serviceaccount/kube-system/kube-gateway-cache deleted",
		"member: clusterrole/kube-gateway:cache-reader kept: [clusterrolebinding/someone-reads] still refer to it",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("deleteCacheIdentity printed\n%s\nwant %q", out.String(), want)
		}
	}
	if _, err := hub.CoreV1().Secrets("kube-gateway").Get(ctx, "member-a-cache", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("hub cache Secret: %v, want NotFound", err)
	}
	if err := member.RbacV1().ClusterRoleBindings().Delete(ctx, other.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := o.deleteCacheIdentity(ctx, cs, r); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "member: clusterrole/kube-gateway:cache-reader deleted\n" {
		t.Errorf("deleteCacheIdentity again printed %q, want the role deleted only", got)
	}
	// Nothing left: nothing to say.
	out.Reset()
	if err := o.deleteCacheIdentity(ctx, cs, r); err != nil || out.Len() > 0 {
		t.Errorf("deleteCacheIdentity with nothing left: %v, printed %q", err, out.String())
	}
}

// The cache Secret of cluster X is X-cache: join refuses to write it when it
// is cluster X-cache's credential, and X-cache's credential when it is X's
// cache Secret.
func TestCheckSecretNames(t *testing.T) {
	ctx := context.Background()
	uc := func(name, secret, cacheSecret string) *gatewayv1alpha1.UpstreamCluster {
		u := &gatewayv1alpha1.UpstreamCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}
		u.Spec.ClientConfig.SecretRef = gatewayv1alpha1.SecretReference{Namespace: "kube-gateway", Name: secret}
		if cacheSecret != "" {
			u.Spec.ClientConfig.CacheSecretRef = &gatewayv1alpha1.SecretReference{Namespace: "kube-gateway", Name: cacheSecret}
		}
		return u
	}
	for _, c := range []struct {
		name      string
		withCache bool
		existing  []*gatewayv1alpha1.UpstreamCluster
		wantErr   string
	}{
		{"prod", true, nil, ""},
		{"prod", true, []*gatewayv1alpha1.UpstreamCluster{uc("prod-cache", "prod-cache", "")}, "is the credential of UpstreamCluster prod-cache"},
		{"prod", false, []*gatewayv1alpha1.UpstreamCluster{uc("prod-cache", "prod-cache", "")}, ""},
		{"prod", true, []*gatewayv1alpha1.UpstreamCluster{uc("prod-cache", "elsewhere", "")}, ""},
		{"prod-cache", false, []*gatewayv1alpha1.UpstreamCluster{uc("prod", "prod", "prod-cache")}, "is the cache identity's Secret of UpstreamCluster prod"},
		{"prod-cache", false, []*gatewayv1alpha1.UpstreamCluster{uc("prod", "prod", "")}, ""},
	} {
		var objs []runtime.Object
		for _, u := range c.existing {
			objs = append(objs, u)
		}
		o := &joinOptions{clusterOptions: newClusterOptions()}
		o.name, o.secretNamespace = c.name, "kube-gateway"
		err := o.checkSecretNames(ctx, &clients{gateway: gatewayfake.NewClientset(objs...)}, c.withCache)
		if c.wantErr == "" {
			if err != nil {
				t.Errorf("%s (cache %v) beside %d clusters: %v", c.name, c.withCache, len(c.existing), err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s (cache %v): error %v, want one containing %q", c.name, c.withCache, err, c.wantErr)
		}
	}
}
