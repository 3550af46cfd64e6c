package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/version/verflag"
)

func newUnjoinCommand() *cobra.Command {
	o := &clusterOptions{}
	*o = newClusterOptions()
	cmd := &cobra.Command{
		Use:   "unjoin NAME --member-kubeconfig FILE",
		Short: "Remove what join created: UpstreamCluster NAME and its Secrets on the hub, the gateway's identities on the member",
		Long: `Remove what "kube-gateway join NAME" created, hub first so that the gateway stops
using the credential before it goes:

On the hub: UpstreamCluster NAME and Secret NAME in --secret-namespace.
The cache identity, if join made one (--cache-resources): hub Secret
NAME-cache, then on the member ClusterRoleBinding IDENTITY:cache-reader,
ServiceAccount IDENTITY-cache, its long-lived token Secret if there is one,
and ClusterRole IDENTITY:cache-reader unless another binding refers to it.
On the member: ClusterRoleBinding IDENTITY:impersonator, RoleBinding
kube-system/IDENTITY:authentication-reader, ServiceAccount
--identity-name in --member-namespace (which invalidates its bound tokens), the
long-lived token Secret IDENTITY-token if there is one, and ClusterRole
IDENTITY:impersonator unless another binding still refers to it.

Only objects join wrote (kube-gateway-join is one of their field managers) are
deleted: one of the same name that another tool made is kept, and said so.

Give the same --identity-name, --member-namespace and --secret-namespace as to
join. What is gone already is skipped: running unjoin again succeeds and changes
nothing. With --dry-run every deletion is a server-side dry run.`,
		Example: `  kube-gateway unjoin member-a --kubeconfig hub.kubeconfig --member-kubeconfig member-a.kubeconfig`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			verflag.PrintAndExitIfRequested()
			o.name = args[0]
			return o.unjoin(cmd.Context(), cmd.OutOrStdout())
		},
	}
	o.addFlags(cmd)
	return cmd
}

func (o *clusterOptions) unjoin(ctx context.Context, out io.Writer) error {
	if err := o.validate(); err != nil {
		return err
	}
	c, err := o.clients()
	if err != nil {
		return err
	}
	r := &reporter{out: out, dryRun: o.dryRun}
	m := o.identity

	ucs := c.gateway.GatewayV1alpha1().UpstreamClusters()
	if err := r.deleteJoined(ctx, "hub", "upstreamcluster", o.name,
		func(ctx context.Context) (metav1.Object, error) { return ucs.Get(ctx, o.name, metav1.GetOptions{}) },
		func(ctx context.Context, opts metav1.DeleteOptions) error { return ucs.Delete(ctx, o.name, opts) }); err != nil {
		return hubError(err, o.secretNamespace)
	}
	hubSecrets := c.hub.CoreV1().Secrets(o.secretNamespace)
	if err := r.deleteJoined(ctx, "hub", "secret", o.secretNamespace+"/"+o.name,
		func(ctx context.Context) (metav1.Object, error) {
			return hubSecrets.Get(ctx, o.name, metav1.GetOptions{})
		},
		func(ctx context.Context, opts metav1.DeleteOptions) error {
			return hubSecrets.Delete(ctx, o.name, opts)
		}); err != nil {
		return hubError(err, o.secretNamespace)
	}
	if err := o.deleteCacheIdentity(ctx, c, r); err != nil {
		return err
	}

	bindings := c.member.RbacV1().ClusterRoleBindings()
	if err := r.deleteJoined(ctx, "member", "clusterrolebinding", m.roleName(),
		func(ctx context.Context) (metav1.Object, error) {
			return bindings.Get(ctx, m.roleName(), metav1.GetOptions{})
		},
		func(ctx context.Context, opts metav1.DeleteOptions) error {
			return bindings.Delete(ctx, m.roleName(), opts)
		}); err != nil {
		return memberError(err, m)
	}
	caReaders := c.member.RbacV1().RoleBindings(metav1.NamespaceSystem)
	if err := r.deleteJoined(ctx, "member", "rolebinding", metav1.NamespaceSystem+"/"+m.caReaderName(),
		func(ctx context.Context) (metav1.Object, error) {
			return caReaders.Get(ctx, m.caReaderName(), metav1.GetOptions{})
		},
		func(ctx context.Context, opts metav1.DeleteOptions) error {
			return caReaders.Delete(ctx, m.caReaderName(), opts)
		}); err != nil {
		return memberError(err, m)
	}
	if err := deleteOwnedTokenSecret(ctx, c.member, r, m, o.dryRun); err != nil {
		return err
	}
	sas := c.member.CoreV1().ServiceAccounts(m.namespace)
	if err := r.deleteJoined(ctx, "member", "serviceaccount", m.namespace+"/"+m.name,
		func(ctx context.Context) (metav1.Object, error) { return sas.Get(ctx, m.name, metav1.GetOptions{}) },
		func(ctx context.Context, opts metav1.DeleteOptions) error { return sas.Delete(ctx, m.name, opts) }); err != nil {
		return memberError(err, m)
	}
	users, err := roleUsers(ctx, c.member, m.roleName(), o.dryRun)
	if err != nil {
		return memberError(err, m)
	}
	if len(users) > 0 {
		fmt.Fprintf(out, "member: clusterrole/%s kept: %s still refer to it\n", m.roleName(), users)
		return nil
	}
	roles := c.member.RbacV1().ClusterRoles()
	if err := r.deleteJoined(ctx, "member", "clusterrole", m.roleName(),
		func(ctx context.Context) (metav1.Object, error) {
			return roles.Get(ctx, m.roleName(), metav1.GetOptions{})
		},
		func(ctx context.Context, opts metav1.DeleteOptions) error {
			return roles.Delete(ctx, m.roleName(), opts)
		}); err != nil {
		return memberError(err, m)
	}
	return nil
}

// roleUsers lists the bindings that refer to ClusterRole role, but for the
// one unjoin deletes (still there in a dry run).
func roleUsers(ctx context.Context, member kubernetes.Interface, role string, dryRun bool) ([]string, error) {
	var users []string
	crbs, err := member.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, b := range crbs.Items {
		if b.RoleRef.Kind == "ClusterRole" && b.RoleRef.Name == role && !(dryRun && b.Name == role) {
			users = append(users, "clusterrolebinding/"+b.Name)
		}
	}
	rbs, err := member.RbacV1().RoleBindings(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, b := range rbs.Items {
		if b.RoleRef.Kind == "ClusterRole" && b.RoleRef.Name == role {
			users = append(users, "rolebinding/"+b.Namespace+"/"+b.Name)
		}
	}
	return users, nil
}

// deleteJoined deletes an object join wrote (join is one of its field
// managers, also after --force-conflicts) and keeps, saying so, one that
// another tool made: unjoin must not remove an identity or UpstreamCluster
// that only shares a name.
func (r *reporter) deleteJoined(ctx context.Context, side, kind, name string, get func(context.Context) (metav1.Object, error), del func(context.Context, metav1.DeleteOptions) error) error {
	obj, err := get(ctx)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading %s %s: %w", kind, name, err)
	}
	if !managedBy(obj, joinFieldManager) {
		fmt.Fprintf(r.out, "%s: %s/%s kept: kube-gateway join did not write it\n", side, kind, name)
		return nil
	}
	uid := obj.GetUID()
	return r.delete(ctx, side, kind, name, r.dryRun, func(ctx context.Context, opts metav1.DeleteOptions) error {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
		return del(ctx, opts)
	})
}
