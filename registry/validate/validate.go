// Package validate runs a check on a store's creates and updates before the
// validation the registry passes in: for rules that read other stored objects
// (one of a kind across the store), which a strategy, given one object, cannot
// see.
package validate

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
)

// Check refuses obj, with the error the client gets, or lets it pass (nil).
type Check func(ctx context.Context, obj runtime.Object) error

// OnCreate returns validate (may be nil) with c run first.
func (c Check) OnCreate(validate rest.ValidateObjectFunc) rest.ValidateObjectFunc {
	return func(ctx context.Context, obj runtime.Object) error {
		if err := c(ctx, obj); err != nil {
			return err
		}
		if validate == nil {
			return nil
		}
		return validate(ctx, obj)
	}
}

// OnUpdate returns validate (may be nil) with c run first on the new object.
func (c Check) OnUpdate(validate rest.ValidateObjectUpdateFunc) rest.ValidateObjectUpdateFunc {
	return func(ctx context.Context, obj, old runtime.Object) error {
		if err := c(ctx, obj); err != nil {
			return err
		}
		if validate == nil {
			return nil
		}
		return validate(ctx, obj, old)
	}
}
