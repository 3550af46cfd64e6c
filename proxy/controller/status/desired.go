package status

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/proxy/health"
)

// What status an observation asks for: the conditions and servers written.

func readyMessage(st *gatewayv1alpha1.UpstreamClusterStatus) string {
	if c := meta.FindStatusCondition(st.Conditions, gatewayv1alpha1.ConditionReady); c != nil {
		return c.Message
	}
	return ""
}

// desiredStatus is old updated with the observation o; now stamps the transitions
// the data plane did not time. Timestamps of what did not change are kept, so an
// unchanged observation gives a status semantically equal to old. spec, the spec
// of the observed generation, sets the InsecureTransport condition; nil keeps it.
func desiredStatus(old *gatewayv1alpha1.UpstreamClusterStatus, o observation, spec *gatewayv1alpha1.UpstreamClusterSpec, now metav1.Time) *gatewayv1alpha1.UpstreamClusterStatus {
	st := old.DeepCopy()
	st.ObservedGeneration = o.generation
	if spec != nil {
		meta.SetStatusCondition(&st.Conditions, insecureTransport(spec, o.generation, now))
	}
	if o.caches != nil {
		st.Caches = *o.caches
	}
	if p := o.problem; p != nil {
		// Nothing is served: status.servers keeps the last health seen.
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type:               gatewayv1alpha1.ConditionReady,
			Status:             metav1.ConditionFalse,
			ObservedGeneration: o.generation,
			LastTransitionTime: now,
			Reason:             p.reason,
			Message:            truncate(p.message, maxMessageLen),
		})
		return st
	}

	prev := make(map[string]gatewayv1alpha1.ServerStatus, len(old.Servers))
	for _, s := range old.Servers {
		prev[s.Endpoint] = s
	}
	var servers []gatewayv1alpha1.ServerStatus
	seen := make(map[string]bool, len(o.servers))
	healthy, unknown := 0, 0
	var failing *health.ServerHealth // the first server judged unhealthy, not disabled
	for i, h := range o.servers {
		if seen[h.Endpoint] { // the API refuses duplicates; keep the first
			continue
		}
		seen[h.Endpoint] = true
		s := gatewayv1alpha1.ServerStatus{
			Endpoint: h.Endpoint,
			Reason:   h.Reason,
			Message:  truncate(h.Message, maxMessageLen),
		}
		if !h.Unknown {
			s.Healthy = ptr.To(h.Healthy)
		}
		switch p, ok := prev[h.Endpoint]; {
		case ok && ptr.Equal(p.Healthy, s.Healthy) && !p.LastTransitionTime.IsZero():
			s.LastTransitionTime = p.LastTransitionTime
		case !h.Since.IsZero(): // else the writer's clock when it notices the change
			s.LastTransitionTime = metav1.NewTime(h.Since).Rfc3339Copy()
		default:
			s.LastTransitionTime = now
		}
		switch {
		case h.Unknown:
			unknown++
		case h.Healthy:
			healthy++
		case failing == nil && h.Reason != gatewayv1alpha1.ServerReasonDisabled:
			failing = &o.servers[i]
		}
		servers = append(servers, s)
	}
	st.Servers = servers

	ready := metav1.Condition{
		Type:               gatewayv1alpha1.ConditionReady,
		ObservedGeneration: o.generation,
		LastTransitionTime: now, // kept by SetStatusCondition when the status does not change
		Message:            fmt.Sprintf("%d of %d servers healthy", healthy, len(servers)),
	}
	if unknown > 0 {
		ready.Message += fmt.Sprintf(", %d not checked yet", unknown)
	}
	switch {
	case healthy == 0 && unknown > 0:
		// Requests are forwarded meanwhile, but nothing has answered yet.
		ready.Status, ready.Reason = metav1.ConditionUnknown, ReasonNotChecked
	case healthy == 0:
		ready.Status, ready.Reason = metav1.ConditionFalse, ReasonNoHealthyServer
		// Say why, so that `kubectl get` and join's wait point at the fix.
		if failing != nil {
			ready.Message += fmt.Sprintf("; %s: %s", failing.Endpoint, failing.Reason)
			if failing.Message != "" {
				ready.Message += ": " + failing.Message
			}
			ready.Message = truncate(ready.Message, maxMessageLen)
		}
	case healthy == len(servers):
		ready.Status, ready.Reason = metav1.ConditionTrue, ReasonServersHealthy
	default:
		ready.Status, ready.Reason = metav1.ConditionTrue, ReasonSomeServersHealthy
	}
	meta.SetStatusCondition(&st.Conditions, ready)
	switch {
	case o.served == nil: // not checked yet: what was known stays
	case o.served.named:
		meta.SetStatusCondition(&st.Conditions, resourcesServed(o.served.unserved, o.generation, now))
	default:
		meta.RemoveStatusCondition(&st.Conditions, gatewayv1alpha1.ConditionDispatchResourcesServed)
	}
	switch {
	case o.door == nil: // not compiled yet: what was known stays
	case o.door.configured:
		meta.SetStatusCondition(&st.Conditions, memberDoorReady(o.door, o.generation, now))
	default:
		meta.RemoveStatusCondition(&st.Conditions, gatewayv1alpha1.ConditionMemberDoorReady)
	}
	return st
}

// memberDoorReady is the MemberDoorReady condition of d.
func memberDoorReady(d *doorCheck, generation int64, now metav1.Time) metav1.Condition {
	if d.problem != nil {
		return condition(gatewayv1alpha1.ConditionMemberDoorReady, generation, now, metav1.ConditionFalse, d.problem.reason,
			"the member door cannot serve: "+d.problem.message)
	}
	return condition(gatewayv1alpha1.ConditionMemberDoorReady, generation, now, metav1.ConditionTrue, ReasonDoorServing,
		"the member door serves spec.secureServing.serverNames")
}

// condition is a condition of generation, its message cut to what status
// takes; LastTransitionTime is now, which SetStatusCondition keeps only when
// the status changes.
func condition(typ string, generation int64, now metav1.Time, status metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{Type: typ, ObservedGeneration: generation, LastTransitionTime: now,
		Status: status, Reason: reason, Message: truncate(message, maxMessageLen)}
}

// resourcesServed is the DispatchResourcesServed condition for unserved.
func resourcesServed(unserved []string, generation int64, now metav1.Time) metav1.Condition {
	if len(unserved) > 0 {
		return condition(gatewayv1alpha1.ConditionDispatchResourcesServed, generation, now, metav1.ConditionFalse, ReasonUnservedResources,
			"the member does not serve what these dispatch rules name, so they never match it "+
				"(resources are plural and lower-case, as in kubectl api-resources): "+strings.Join(unserved, "; "))
	}
	return condition(gatewayv1alpha1.ConditionDispatchResourcesServed, generation, now, metav1.ConditionTrue, ReasonResourcesServed,
		"the member serves every API group and resource the dispatch rules name")
}

// insecureTransport is the InsecureTransport condition of spec.
func insecureTransport(spec *gatewayv1alpha1.UpstreamClusterSpec, generation int64, now metav1.Time) metav1.Condition {
	if !spec.ClientConfig.Insecure {
		return condition(gatewayv1alpha1.ConditionInsecureTransport, generation, now, metav1.ConditionFalse, ReasonCertificatesVerified,
			"the servers' certificates are verified")
	}
	var endpoints []string
	for _, s := range spec.Servers {
		if !s.Disabled {
			endpoints = append(endpoints, s.Endpoint)
		}
	}
	return condition(gatewayv1alpha1.ConditionInsecureTransport, generation, now, metav1.ConditionTrue, ReasonInsecureSkipVerify,
		fmt.Sprintf("spec.clientConfig.insecure is set: the certificates of %s are not verified, "+
			"so anyone on the network path can impersonate them and capture the gateway's credential", strings.Join(endpoints, ", ")))
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
