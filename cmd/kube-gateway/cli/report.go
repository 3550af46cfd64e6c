package cli

import (
	"context"
	"fmt"
	"io"
	"reflect"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func managedBy(obj metav1.Object, manager string) bool {
	for _, f := range obj.GetManagedFields() {
		if f.Manager == manager {
			return true
		}
	}
	return false
}

// memberError names what to fix when the member refuses a change.
func memberError(err error, m memberIdentity) error {
	switch {
	case apierrors.IsConflict(err):
		return fmt.Errorf("the member has it already, with other values set by another tool (%w): choose another --identity-name, or pass --force-conflicts to take it over (which changes it for whatever uses it now)", err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("the member refused (%w): the user of --member-kubeconfig must be allowed to create ServiceAccounts and Secrets in namespace %s, ClusterRoles, ClusterRoleBindings and RoleBindings in kube-system, and to grant the impersonate verb (and get, list and watch on the --cache-resources: RBAC lets a user grant only what they hold; cluster-admin can)", err, m.namespace)
	case apierrors.IsNotFound(err) && strings.Contains(err.Error(), "namespaces"):
		return fmt.Errorf("the member has no namespace %s (%w): create it or pass --member-namespace", m.namespace, err)
	}
	return fmt.Errorf("member: %w", err)
}

// hubError names what to fix when the hub refuses a change.
func hubError(err error, secretNamespace string) error {
	switch {
	case apierrors.IsConflict(err):
		return fmt.Errorf("the hub has it already, with other values set by another tool (%w): choose another NAME, or pass --force-conflicts to take it over", err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("the hub refused (%w): the user of --kubeconfig must be allowed to manage Secrets in namespace %s and UpstreamClusters", err, secretNamespace)
	case apierrors.IsNotFound(err) && strings.Contains(err.Error(), "namespaces"):
		return fmt.Errorf("the hub has no namespace %s (%w): install the gateway first, or pass the gateway's --secret-namespace", secretNamespace, err)
	}
	return fmt.Errorf("hub: %w", err)
}

// reporter prints one line per object join or unjoin writes: created,
// configured, unchanged or deleted, marked as a dry run when it was one.
type reporter struct {
	out    io.Writer
	dryRun bool
}

func (r *reporter) suffix() string {
	if r.dryRun {
		return " (server dry run)"
	}
	return ""
}

// apply applies an object with write and reports how it compares with what
// get returned before.
func (r *reporter) apply(ctx context.Context, side, kind, name string, get, write func(context.Context) (runtime.Object, error)) error {
	before, err := get(ctx)
	switch {
	case apierrors.IsNotFound(err):
		before = nil
	case err != nil:
		return fmt.Errorf("reading %s %s: %w", kind, name, err)
	}
	after, err := write(ctx)
	if err != nil {
		return fmt.Errorf("applying %s %s: %w", kind, name, err)
	}
	verb := "created"
	if before != nil {
		verb = "configured"
		if sameContent(before, after) {
			verb = "unchanged"
		}
	}
	fmt.Fprintf(r.out, "%s: %s/%s %s%s\n", side, kind, name, verb, r.suffix())
	return nil
}

// delete deletes an object, and reports it unless it was gone already.
func (r *reporter) delete(ctx context.Context, side, kind, name string, dryRun bool, del func(context.Context, metav1.DeleteOptions) error) error {
	opts := metav1.DeleteOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	err := del(ctx, opts)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("deleting %s %s: %w", kind, name, err)
	}
	fmt.Fprintf(r.out, "%s: %s/%s deleted%s\n", side, kind, name, r.suffix())
	return nil
}

// sameContent compares two versions of an object without what every write
// changes (resource version, managed fields) and the status.
func sameContent(a, b runtime.Object) bool {
	norm := func(o runtime.Object) map[string]any {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return nil
		}
		delete(u, "status")
		delete(u, "kind")
		delete(u, "apiVersion")
		if md, ok := u["metadata"].(map[string]any); ok {
			delete(md, "resourceVersion")
			delete(md, "managedFields")
			delete(md, "generation")
		}
		return u
	}
	return reflect.DeepEqual(norm(a), norm(b))
}
