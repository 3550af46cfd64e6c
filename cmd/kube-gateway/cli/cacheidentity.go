package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/discovery"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	gatewayvalidation "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1/validation"
)

// The cache identity is a second identity of the gateway on a member, beside
// the impersonating one: it fills the gateway's fleet caches (CachedResources)
// by list and watch, and may read exactly the resources it was given, in every
// namespace, nothing else. The member chart renders the same objects from
// cache.resources (a test compares both).

// cacheVerbs are what the cache identity may do with its resources: the
// caches list and watch; get reads one object the same way.
var cacheVerbs = []string{"get", "list", "watch"}

// cache is the cache identity of m: ServiceAccount NAME-cache beside m's.
func (m memberIdentity) cache() memberIdentity {
	return memberIdentity{name: m.name + "-cache", namespace: m.namespace}
}

// cacheRoleName is the ClusterRole and ClusterRoleBinding of the cache identity.
func (m memberIdentity) cacheRoleName() string { return m.name + ":cache-reader" }

// cacheSecretName is the hub Secret with the cache identity's credential of
// UpstreamCluster cluster (spec.clientConfig.cacheSecretRef).
func cacheSecretName(cluster string) string { return cluster + "-cache" }

func (m memberIdentity) cacheClusterRole(resources []schema.GroupResource) *rbacv1ac.ClusterRoleApplyConfiguration {
	return rbacv1ac.ClusterRole(m.cacheRoleName()).
		WithLabels(m.labels()).
		WithRules(cacheRules(resources)...)
}

func (m memberIdentity) cacheClusterRoleBinding() *rbacv1ac.ClusterRoleBindingApplyConfiguration {
	return rbacv1ac.ClusterRoleBinding(m.cacheRoleName()).
		WithLabels(m.labels()).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("ClusterRole").WithName(m.cacheRoleName())).
		WithSubjects(m.cache().subject())
}

// cacheRules grants cacheVerbs on resources: one rule per API group, groups
// and resources sorted, as the member chart renders them, so that the order
// of the flag changes nothing.
func cacheRules(resources []schema.GroupResource) []*rbacv1ac.PolicyRuleApplyConfiguration {
	byGroup := map[string][]string{}
	for _, r := range resources {
		byGroup[r.Group] = append(byGroup[r.Group], r.Resource)
	}
	groups := make([]string, 0, len(byGroup))
	for g := range byGroup {
		groups = append(groups, g)
	}
	slices.Sort(groups)
	rules := make([]*rbacv1ac.PolicyRuleApplyConfiguration, 0, len(groups))
	for _, g := range groups {
		rs := byGroup[g]
		slices.Sort(rs)
		rules = append(rules, rbacv1ac.PolicyRule().WithAPIGroups(g).WithResources(rs...).WithVerbs(cacheVerbs...))
	}
	return rules
}

// parseCacheResources reads --cache-resources: resource[.group] as kubectl
// names resources (configmaps, deployments.apps), each a whole resource of
// a named group that the gateway may cache. Wildcards and subresources are
// refused: the identity may read exactly what is named.
func parseCacheResources(items []string) ([]schema.GroupResource, error) {
	var out []schema.GroupResource
	for _, item := range items {
		if item == "" {
			return nil, errors.New("--cache-resources has an empty entry: give resource[.group] names separated by commas, such as configmaps,deployments.apps")
		}
		if strings.Contains(item, "*") {
			return nil, fmt.Errorf("--cache-resources %q: name each resource: the cache identity may read exactly the resources named, never a wildcard", item)
		}
		// resource[.group][/subresource], split as kubectl create clusterrole
		// splits its --resource.
		name, sub, isSub := strings.Cut(item, "/")
		gr := schema.ParseGroupResource(name)
		resource := gr.Resource
		if isSub {
			resource += "/" + sub
		}
		if errs := gatewayvalidation.ValidateCachedResourceName(gr.Group, resource, field.NewPath("resource")); len(errs) > 0 {
			return nil, fmt.Errorf("--cache-resources %q: %s", item, errs[0].Detail)
		}
		if gr.Group != "" {
			if msgs := validation.IsDNS1123Subdomain(gr.Group); len(msgs) > 0 {
				return nil, fmt.Errorf("--cache-resources %q: the API group %q after the first dot: %s", item, gr.Group, strings.Join(msgs, "; "))
			}
		}
		if slices.Contains(out, gr) {
			return nil, fmt.Errorf("--cache-resources %q given twice", item)
		}
		out = append(out, gr)
	}
	return out, nil
}

// checkServed makes sure that the member serves every resource of want, with
// list and watch (what the caches do), so that a typo fails here and not, much
// later, as a cache that cannot list. It names the plural when given a
// singular or short name, as kubectl would resolve it.
func checkServed(d discovery.DiscoveryInterface, want []schema.GroupResource) error {
	_, lists, err := d.ServerGroupsAndResources()
	var failed map[schema.GroupVersion]error
	if err != nil {
		var partial *discovery.ErrGroupDiscoveryFailed
		if !errors.As(err, &partial) {
			return fmt.Errorf("cannot read the member's API discovery to check --cache-resources: %w", err)
		}
		failed = partial.Groups
	}
	for _, gr := range want {
		var found *metav1.APIResource
		var suggest []string
		served := false
		for _, l := range lists {
			gv, err := schema.ParseGroupVersion(l.GroupVersion)
			if err != nil || gv.Group != gr.Group {
				continue
			}
			served = true
			for i, r := range l.APIResources {
				switch {
				case r.Name == gr.Resource:
					found = &l.APIResources[i]
				case !strings.Contains(r.Name, "/") && (r.SingularName == gr.Resource || slices.Contains(r.ShortNames, gr.Resource)):
					suggest = append(suggest, schema.GroupResource{Group: gr.Group, Resource: r.Name}.String())
				}
			}
		}
		for gv, err := range failed {
			if gv.Group == gr.Group && found == nil {
				return fmt.Errorf("--cache-resources %s: the member's discovery of %s failed (%v): fix that API service on the member, or leave the resource out", gr, gv, err)
			}
		}
		switch {
		case found != nil && (!slices.Contains(found.Verbs, "list") || !slices.Contains(found.Verbs, "watch")):
			return fmt.Errorf("--cache-resources %s: the member serves it without list and watch (verbs %v): only resources that can be listed and watched can be cached", gr, found.Verbs)
		case found != nil:
		case len(suggest) > 0:
			slices.Sort(suggest)
			return fmt.Errorf("--cache-resources %s: name the resource by its plural as in its URL: %s", gr, strings.Join(slices.Compact(suggest), " or "))
		case !served && gr.Group != "":
			return fmt.Errorf("--cache-resources %s: the member does not serve API group %q: install what serves it first (such as its CustomResourceDefinition), or check the name with `kubectl api-resources` on the member", gr, gr.Group)
		default:
			return fmt.Errorf("--cache-resources %s: the member has no such resource: check the name with `kubectl api-resources` on the member (resource[.group], the group after the first dot)", gr)
		}
	}
	return nil
}

// applyCacheIdentity applies the cache identity of m on the member, with the
// right to read resources.
func applyCacheIdentity(ctx context.Context, c *clients, r *reporter, m memberIdentity, resources []schema.GroupResource, apply metav1.ApplyOptions) error {
	cm := m.cache()
	sas := c.member.CoreV1().ServiceAccounts(cm.namespace)
	if err := r.apply(ctx, "member", "serviceaccount", cm.namespace+"/"+cm.name,
		func(ctx context.Context) (runtime.Object, error) { return sas.Get(ctx, cm.name, metav1.GetOptions{}) },
		func(ctx context.Context) (runtime.Object, error) { return sas.Apply(ctx, cm.serviceAccount(), apply) }); err != nil {
		return memberError(err, m)
	}
	roles := c.member.RbacV1().ClusterRoles()
	if err := r.apply(ctx, "member", "clusterrole", m.cacheRoleName(),
		func(ctx context.Context) (runtime.Object, error) {
			return roles.Get(ctx, m.cacheRoleName(), metav1.GetOptions{})
		},
		func(ctx context.Context) (runtime.Object, error) {
			return roles.Apply(ctx, m.cacheClusterRole(resources), apply)
		}); err != nil {
		return memberError(err, m)
	}
	bindings := c.member.RbacV1().ClusterRoleBindings()
	if err := r.apply(ctx, "member", "clusterrolebinding", m.cacheRoleName(),
		func(ctx context.Context) (runtime.Object, error) {
			return bindings.Get(ctx, m.cacheRoleName(), metav1.GetOptions{})
		},
		func(ctx context.Context) (runtime.Object, error) {
			return bindings.Apply(ctx, m.cacheClusterRoleBinding(), apply)
		}); err != nil {
		return memberError(err, m)
	}
	return nil
}

// deleteCacheIdentity deletes what join wrote for the cache identity: its hub
// Secret, then on the member its binding (which ends its read rights), token
// Secret, ServiceAccount (which invalidates its bound tokens), and its
// ClusterRole unless another binding still refers to it. Objects join did not
// write are kept, and said so.
func (o *clusterOptions) deleteCacheIdentity(ctx context.Context, c *clients, r *reporter) error {
	m, cm, name := o.identity, o.identity.cache(), cacheSecretName(o.name)
	hubSecrets := c.hub.CoreV1().Secrets(o.secretNamespace)
	if err := r.deleteJoined(ctx, "hub", "secret", o.secretNamespace+"/"+name,
		func(ctx context.Context) (metav1.Object, error) {
			return hubSecrets.Get(ctx, name, metav1.GetOptions{})
		},
		func(ctx context.Context, opts metav1.DeleteOptions) error { return hubSecrets.Delete(ctx, name, opts) }); err != nil {
		return hubError(err, o.secretNamespace)
	}
	bindings := c.member.RbacV1().ClusterRoleBindings()
	if err := r.deleteJoined(ctx, "member", "clusterrolebinding", m.cacheRoleName(),
		func(ctx context.Context) (metav1.Object, error) {
			return bindings.Get(ctx, m.cacheRoleName(), metav1.GetOptions{})
		},
		func(ctx context.Context, opts metav1.DeleteOptions) error {
			return bindings.Delete(ctx, m.cacheRoleName(), opts)
		}); err != nil {
		return memberError(err, m)
	}
	if err := deleteOwnedTokenSecret(ctx, c.member, r, cm, o.dryRun); err != nil {
		return err
	}
	sas := c.member.CoreV1().ServiceAccounts(cm.namespace)
	if err := r.deleteJoined(ctx, "member", "serviceaccount", cm.namespace+"/"+cm.name,
		func(ctx context.Context) (metav1.Object, error) { return sas.Get(ctx, cm.name, metav1.GetOptions{}) },
		func(ctx context.Context, opts metav1.DeleteOptions) error { return sas.Delete(ctx, cm.name, opts) }); err != nil {
		return memberError(err, m)
	}
	roles := c.member.RbacV1().ClusterRoles()
	if _, err := roles.Get(ctx, m.cacheRoleName(), metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return nil
	}
	users, err := roleUsers(ctx, c.member, m.cacheRoleName(), o.dryRun)
	if err != nil {
		return memberError(err, m)
	}
	if len(users) > 0 {
		fmt.Fprintf(r.out, "member: clusterrole/%s kept: %s still refer to it\n", m.cacheRoleName(), users)
		return nil
	}
	if err := r.deleteJoined(ctx, "member", "clusterrole", m.cacheRoleName(),
		func(ctx context.Context) (metav1.Object, error) {
			return roles.Get(ctx, m.cacheRoleName(), metav1.GetOptions{})
		},
		func(ctx context.Context, opts metav1.DeleteOptions) error {
			return roles.Delete(ctx, m.cacheRoleName(), opts)
		}); err != nil {
		return memberError(err, m)
	}
	return nil
}

// checkSecretNames makes sure that the hub Secrets join writes belong to no
// other UpstreamCluster: the cache Secret of cluster X is X-cache, which is
// also the credential Secret of a cluster joined as X-cache. Mixed up, the
// cache would read with an impersonating credential, or a cluster forward
// with a read-only one.
func (o *joinOptions) checkSecretNames(ctx context.Context, c *clients, withCache bool) error {
	ucs := c.gateway.GatewayV1alpha1().UpstreamClusters()
	ref := func(name string) gatewayv1alpha1.SecretReference {
		return gatewayv1alpha1.SecretReference{Namespace: o.secretNamespace, Name: name}
	}
	get := func(name string) (*gatewayv1alpha1.UpstreamCluster, error) {
		uc, err := ucs.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, hubError(err, o.secretNamespace)
		}
		return uc, nil
	}
	if withCache {
		other, err := get(cacheSecretName(o.name))
		if err != nil {
			return err
		}
		if other != nil && other.Spec.ClientConfig.SecretRef == ref(cacheSecretName(o.name)) {
			return fmt.Errorf("hub Secret %s/%s, where --cache-resources would put the cache identity's token of %s, is the credential of UpstreamCluster %s: register one of them under another NAME",
				o.secretNamespace, cacheSecretName(o.name), o.name, other.Name)
		}
	}
	if base, ok := strings.CutSuffix(o.name, "-cache"); ok {
		other, err := get(base)
		if err != nil {
			return err
		}
		if other != nil && other.Spec.ClientConfig.CacheSecretRef != nil && *other.Spec.ClientConfig.CacheSecretRef == ref(o.name) {
			return fmt.Errorf("hub Secret %s/%s, where join would put the gateway's credential of %s, is the cache identity's Secret of UpstreamCluster %s: register %s under another NAME",
				o.secretNamespace, o.name, o.name, other.Name, o.name)
		}
	}
	return nil
}
