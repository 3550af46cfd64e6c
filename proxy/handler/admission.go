package handler

import (
	"context"
	"sync/atomic"

	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	mutatingwebhook "k8s.io/apiserver/pkg/admission/plugin/webhook/mutating"
	validatingwebhook "k8s.io/apiserver/pkg/admission/plugin/webhook/validating"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

var (
	proxyOptionsKind = gatewayv1alpha1.SchemeGroupVersion.WithKind("UpstreamClusterProxyOptions")
	clustersResource = gatewayv1alpha1.SchemeGroupVersion.WithResource("upstreamclusters")
)

// admitConnect runs CONNECT admission as the generic Connect handler does, so
// that admission webhooks and policies on upstreamclusters/proxy apply.
func (h *Handler) admitConnect(ctx context.Context, name, path string) error {
	if h.admit == nil || !h.admit.Handles(admission.Connect) || (h.gate != nil && !h.gate.Needed()) {
		return nil
	}
	u, _ := genericapirequest.UserFrom(ctx)
	attrs := admission.NewAttributesRecord(&gatewayv1alpha1.UpstreamClusterProxyOptions{Path: path}, nil, proxyOptionsKind,
		"", name, clustersResource, "proxy", admission.Connect, nil, false, u)
	if m, ok := h.admit.(admission.MutationInterface); ok {
		if err := m.Admit(ctx, attrs, h.interfaces); err != nil {
			return err
		}
	}
	if v, ok := h.admit.(admission.ValidationInterface); ok {
		return v.Validate(ctx, attrs, h.interfaces)
	}
	return nil
}

// ConnectAdmissionGate tells whether CONNECT admission could refuse a proxy
// request at all. Of the admission plugins an aggregated apiserver has, only
// the webhook and admission policy plugins handle CONNECT, and they act only
// through configuration objects on the hub (webhook configurations,
// policies). While the hub has none, running the chain for every proxied
// request decides nothing and still costs CPU on every request
// (docs/benchmark-history.md).
//
// Needed runs on every proxied request, so it reads two atomics rather than the
// informers' stores (a lock and a list of keys each): event handlers count the
// objects.
type ConnectAdmissionGate struct {
	handlers []cache.ResourceEventHandlerRegistration
	// objects counts the configuration objects of every watched kind, as
	// the handlers were told of them.
	objects atomic.Int64
	// synced latches once every handler has been told of the initial lists.
	synced atomic.Bool
}

// NewConnectAdmissionGate watches, through f (the informer factory the
// admission plugins use, so that no watch is added), the configuration objects
// of the enabled webhook and policy plugins. It returns nil (admission always
// runs) when another plugin that could handle CONNECT is enabled. Callers must
// not use it when an admission configuration file is in use: static policies
// and webhooks show in no hub object.
func NewConnectAdmissionGate(f informers.SharedInformerFactory, enabledPlugins []string) *ConnectAdmissionGate {
	var watched []cache.SharedIndexInformer
	a := f.Admissionregistration().V1()
	for _, p := range enabledPlugins {
		switch p {
		case mutatingwebhook.PluginName:
			watched = append(watched, a.MutatingWebhookConfigurations().Informer())
		case validatingwebhook.PluginName:
			watched = append(watched, a.ValidatingWebhookConfigurations().Informer())
		case mutating.PluginName:
			watched = append(watched, a.MutatingAdmissionPolicies().Informer(), a.MutatingAdmissionPolicyBindings().Informer())
		case validating.PluginName:
			watched = append(watched, a.ValidatingAdmissionPolicies().Informer(), a.ValidatingAdmissionPolicyBindings().Informer())
		case lifecycle.PluginName: // create, update and delete only
		default:
			return nil
		}
	}
	g := &ConnectAdmissionGate{}
	count := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { g.objects.Add(1) },
		DeleteFunc: func(any) { g.objects.Add(-1) }, // tombstones too: each was added before
	}
	for _, i := range watched {
		reg, err := i.AddEventHandler(count)
		if err != nil { // the informer was stopped: nothing can be known
			return nil
		}
		g.handlers = append(g.handlers, reg)
	}
	return g
}

// Needed reports whether CONNECT admission must run: the configuration is not
// known yet, or some webhook configuration or policy exists (whatever it
// matches; the plugins decide that).
func (g *ConnectAdmissionGate) Needed() bool {
	if g.objects.Load() > 0 {
		return true
	}
	if g.synced.Load() {
		return false
	}
	for _, h := range g.handlers {
		if !h.HasSynced() {
			return true
		}
	}
	g.synced.Store(true)
	return false
}
