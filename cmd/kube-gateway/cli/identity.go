package cli

import (
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
)

// joinFieldManager owns, for server-side apply, every field join writes, on
// the member and on the hub.
const joinFieldManager = "kube-gateway-join"

// memberIdentity is the gateway's identity on a member cluster: the objects
// the chart charts/kube-gateway-member installs with identity.type
// serviceAccount, under the same names and with the same rules, so that join
// and the chart are interchangeable (a test compares both).
type memberIdentity struct {
	name      string // the chart's value "name": base of every object name
	namespace string // the chart's release namespace
}

func (m memberIdentity) roleName() string        { return m.name + ":impersonator" }
func (m memberIdentity) tokenSecretName() string { return m.name + "-token" }

// caReaderName is the RoleBinding in kube-system that lets the identity read
// the member's client CA (ConfigMap extension-apiserver-authentication), for
// a member door with clientCA: Member.
func (m memberIdentity) caReaderName() string { return m.name + ":authentication-reader" }

// caReaderRole is the Role every kube-apiserver bootstraps in kube-system to
// read that ConfigMap.
const caReaderRole = "extension-apiserver-authentication-reader"

// username is the name the member authenticates the identity's tokens as.
func (m memberIdentity) username() string {
	return "system:serviceaccount:" + m.namespace + ":" + m.name
}

func (m memberIdentity) labels() map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":       "kube-gateway-member",
		"app.kubernetes.io/managed-by": joinFieldManager,
	}
}

func (m memberIdentity) serviceAccount() *corev1ac.ServiceAccountApplyConfiguration {
	return corev1ac.ServiceAccount(m.name, m.namespace).
		WithLabels(m.labels()).
		WithAutomountServiceAccountToken(false)
}

// tokenSecret is the long-lived token of the ServiceAccount: the member's
// token controller fills in data.token and data.ca.crt.
func (m memberIdentity) tokenSecret() *corev1ac.SecretApplyConfiguration {
	return corev1ac.Secret(m.tokenSecretName(), m.namespace).
		WithLabels(m.labels()).
		WithAnnotations(map[string]string{corev1.ServiceAccountNameKey: m.name}).
		WithType(corev1.SecretTypeServiceAccountToken)
}

// impersonatorRules is the right to impersonate hub users: every forwarded
// request is then authorized by the member's RBAC as the hub user (name,
// groups, UID, extras).
func impersonatorRules() []*rbacv1ac.PolicyRuleApplyConfiguration {
	return []*rbacv1ac.PolicyRuleApplyConfiguration{
		rbacv1ac.PolicyRule().WithAPIGroups("").WithResources("users", "groups", "serviceaccounts").WithVerbs("impersonate"),
		// UIDs and user extras. RBAC has no "userextras/*" wildcard (only
		// "*/subresource"), so all of this group is granted for the verb.
		rbacv1ac.PolicyRule().WithAPIGroups("authentication.k8s.io").WithResources("*").WithVerbs("impersonate"),
		// The member door checks the member's own clients' bearer tokens
		// with TokenReviews, their own impersonation with
		// SubjectAccessReviews, on the member.
		rbacv1ac.PolicyRule().WithAPIGroups("authentication.k8s.io").WithResources("tokenreviews").WithVerbs("create"),
		rbacv1ac.PolicyRule().WithAPIGroups("authorization.k8s.io").WithResources("subjectaccessreviews").WithVerbs("create"),
	}
}

func (m memberIdentity) clusterRole() *rbacv1ac.ClusterRoleApplyConfiguration {
	return rbacv1ac.ClusterRole(m.roleName()).
		WithLabels(m.labels()).
		WithRules(impersonatorRules()...)
}

func (m memberIdentity) subject() *rbacv1ac.SubjectApplyConfiguration {
	return rbacv1ac.Subject().WithKind(rbacv1.ServiceAccountKind).WithName(m.name).WithNamespace(m.namespace)
}

func (m memberIdentity) clusterRoleBinding() *rbacv1ac.ClusterRoleBindingApplyConfiguration {
	return rbacv1ac.ClusterRoleBinding(m.roleName()).
		WithLabels(m.labels()).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("ClusterRole").WithName(m.roleName())).
		WithSubjects(m.subject())
}

func (m memberIdentity) caReaderBinding() *rbacv1ac.RoleBindingApplyConfiguration {
	return rbacv1ac.RoleBinding(m.caReaderName(), metav1.NamespaceSystem).
		WithLabels(m.labels()).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("Role").WithName(caReaderRole)).
		WithSubjects(m.subject())
}
