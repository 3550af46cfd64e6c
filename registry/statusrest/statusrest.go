// Package statusrest serves a resource's status subresource from a copy of its
// generic store whose update and reset-fields strategy is the status one: an
// update writes the status only, and nothing is created or deleted there.
package statusrest

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// Strategy is how the status subresource updates an object.
type Strategy interface {
	rest.RESTUpdateStrategy
	rest.ResetFieldsStrategy
}

// REST serves the status subresource.
type REST struct {
	store *genericregistry.Store
}

var (
	_ rest.Patcher             = &REST{}
	_ rest.ResetFieldsStrategy = &REST{}
)

// New returns the status subresource of the resource of main (a completed
// store), updated by status.
func New(main *genericregistry.Store, status Strategy) *REST {
	store := *main
	store.CreateStrategy, store.DeleteStrategy = nil, nil
	store.UpdateStrategy, store.ResetFieldsStrategy = status, status
	return &REST{store: &store}
}

func (r *REST) New() runtime.Object { return r.store.NewFunc() }

// Destroy does nothing: the main store owns the shared storage.
func (r *REST) Destroy() {}

func (r *REST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

// Update writes only the status; the create path is refused.
func (r *REST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
	updateValidation rest.ValidateObjectUpdateFunc, _ bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}

func (r *REST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

func (r *REST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}
