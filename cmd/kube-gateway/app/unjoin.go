package app

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/version/verflag"
)

func newUnjoinCommand() *cobra.Command {
	o := &clusterOptions{}
	*o = newClusterOptions()
	cmd := &cobra.Command{
		Use:   "unjoin NAME --member-kubeconfig FILE",
		Short: "Remove what join created: UpstreamCluster NAME and its Secret on the hub, the gateway's identity on the member",
		Long: `Remove what "kube-gateway join NAME" created, hub first so that the gateway stops
using the credential before it goes:

On the hub: UpstreamCluster NAME and Secret NAME in --secret-namespace.
On the member: ClusterRoleBinding IDENTITY:impersonator, ServiceAccount
--identity-name in --member-namespace (which invalidates its bound tokens), the
long-lived token Secret IDENTITY-token if there is one, and ClusterRole
IDENTITY:impersonator unless another binding still refers to it.

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

	if err := r.delete(ctx, "hub", "upstreamcluster", o.name, o.dryRun, func(ctx context.Context, opts metav1.DeleteOptions) error {
		return c.gateway.GatewayV1alpha1().UpstreamClusters().Delete(ctx, o.name, opts)
	}); err != nil {
		return hubError(err, o.secretNamespace)
	}
	if err := r.delete(ctx, "hub", "secret", o.secretNamespace+"/"+o.name, o.dryRun, func(ctx context.Context, opts metav1.DeleteOptions) error {
		return c.hub.CoreV1().Secrets(o.secretNamespace).Delete(ctx, o.name, opts)
	}); err != nil {
		return hubError(err, o.secretNamespace)
	}

	if err := r.delete(ctx, "member", "clusterrolebinding", m.roleName(), o.dryRun, func(ctx context.Context, opts metav1.DeleteOptions) error {
		return c.member.RbacV1().ClusterRoleBindings().Delete(ctx, m.roleName(), opts)
	}); err != nil {
		return memberError(err, m)
	}
	if err := deleteOwnedTokenSecret(ctx, c.member, r, m, o.dryRun); err != nil {
		return err
	}
	if err := r.delete(ctx, "member", "serviceaccount", m.namespace+"/"+m.name, o.dryRun, func(ctx context.Context, opts metav1.DeleteOptions) error {
		return c.member.CoreV1().ServiceAccounts(m.namespace).Delete(ctx, m.name, opts)
	}); err != nil {
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
	if err := r.delete(ctx, "member", "clusterrole", m.roleName(), o.dryRun, func(ctx context.Context, opts metav1.DeleteOptions) error {
		return c.member.RbacV1().ClusterRoles().Delete(ctx, m.roleName(), opts)
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
