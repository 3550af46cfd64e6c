package upstreamcluster

import (
	"k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	mutatingwebhook "k8s.io/apiserver/pkg/admission/plugin/webhook/mutating"
	validatingwebhook "k8s.io/apiserver/pkg/admission/plugin/webhook/validating"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// ConnectAdmissionGate tells whether CONNECT admission could refuse a proxy
// request at all. Of the admission plugins an aggregated apiserver has, only
// the webhook and admission policy plugins handle CONNECT, and they act only
// through configuration objects on the hub (webhook configurations,
// policies). While the hub has none, running the chain for every proxied
// request decides nothing and costs about a tenth of the gateway's CPU per
// request (docs/benchmark.md).
type ConnectAdmissionGate struct {
	informers []cache.SharedIndexInformer
}

// NewConnectAdmissionGate watches, through f (the informer factory the
// admission plugins use, so that no watch is added), the configuration objects
// of the enabled webhook and policy plugins. It returns nil (admission always
// runs) when another plugin that could handle CONNECT is enabled. Callers must
// not use it when an admission configuration file is in use: static policies
// and webhooks show in no hub object.
func NewConnectAdmissionGate(f informers.SharedInformerFactory, enabledPlugins []string) *ConnectAdmissionGate {
	g := &ConnectAdmissionGate{}
	a := f.Admissionregistration().V1()
	for _, p := range enabledPlugins {
		switch p {
		case mutatingwebhook.PluginName:
			g.informers = append(g.informers, a.MutatingWebhookConfigurations().Informer())
		case validatingwebhook.PluginName:
			g.informers = append(g.informers, a.ValidatingWebhookConfigurations().Informer())
		case mutating.PluginName:
			g.informers = append(g.informers, a.MutatingAdmissionPolicies().Informer(), a.MutatingAdmissionPolicyBindings().Informer())
		case validating.PluginName:
			g.informers = append(g.informers, a.ValidatingAdmissionPolicies().Informer(), a.ValidatingAdmissionPolicyBindings().Informer())
		case lifecycle.PluginName: // create, update and delete only
		default:
			return nil
		}
	}
	return g
}

// Needed reports whether CONNECT admission must run: the configuration is not
// known yet, or some webhook configuration or policy exists (whatever it
// matches; the plugins decide that).
func (g *ConnectAdmissionGate) Needed() bool {
	for _, i := range g.informers {
		if !i.HasSynced() || len(i.GetStore().ListKeys()) > 0 {
			return true
		}
	}
	return false
}
