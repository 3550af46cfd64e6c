package status

import (
	"context"
	"fmt"

	"k8s.io/utils/ptr"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// Reasons of the Events recorded on UpstreamClusters. A configuration problem is
// recorded with its own reason (e.g. SecretNotFound, InvalidSecret,
// InvalidCAData, InvalidConfiguration: see proxy/cluster).
const (
	// EventEndpointUnhealthy (Warning): a server stopped receiving requests.
	EventEndpointUnhealthy = "EndpointUnhealthy"
	// EventEndpointHealthy (Normal): a server receives requests again.
	EventEndpointHealthy = "EndpointHealthy"
	// EventClusterNotReady (Warning): no server of the cluster is healthy.
	EventClusterNotReady = "ClusterNotReady"
	// EventClusterReady (Normal): the cluster serves requests again.
	EventClusterReady = "ClusterReady"
	// EventInsecureTransport (Warning): the servers' certificates are not
	// verified (spec.clientConfig.insecure).
	EventInsecureTransport = "InsecureTransport"
	// EventCertificatesVerified (Normal): certificate verification is on again.
	EventCertificatesVerified = "CertificatesVerified"
	// EventUnservedResources (Warning): a dispatch rule names an API group or
	// resource the member does not serve.
	EventUnservedResources = ReasonUnservedResources
	// EventMemberDoorUnavailable (Warning): the member door of the cluster
	// cannot serve (its Secret is missing or unusable).
	EventMemberDoorUnavailable = "MemberDoorUnavailable"
)

// EventSource is the component of the Events the gateway records.
const EventSource = "kube-gateway"

// maxEventMessageLen caps an Event message (events.k8s.io refuses notes over
// 1 KiB; core Events are kept as small).
const maxEventMessageLen = 1024

// RecordEvents makes the Writer record Events through hub while it leads: every
// leadership term gets an event broadcaster of its own, stopped when the term
// ends, so only the leader records.
//
// The core/v1 Event API is used (client-go tools/record) rather than
// events.k8s.io: kubectl describe lists core Events either way, but
// events.k8s.io's client folds Events of the same reason into one series that
// keeps only the first note, so two endpoints turning unhealthy would show one
// message; tools/record keeps each message and counts repeats. Events about a
// cluster-scoped object go to the "default" namespace.
func (w *Writer) RecordEvents(hub typedcorev1.EventsGetter) {
	w.newRecorder = func(ctx context.Context) (record.EventRecorder, func()) {
		broadcaster := record.NewBroadcaster(record.WithContext(ctx))
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: hub.Events("")})
		return broadcaster.NewRecorder(runtime.NewScheme(), corev1.EventSource{Component: EventSource}), broadcaster.Shutdown
	}
}

// event is one Event to record.
type event struct {
	eventType, reason, message string
}

// reference is what Events of uc refer to (involvedObject).
func reference(uc *gatewayv1alpha1.UpstreamCluster) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		APIVersion: gatewayv1alpha1.SchemeGroupVersion.String(),
		Kind:       "UpstreamCluster",
		Name:       uc.Name,
		UID:        uc.UID,
	}
}

// recordTransitions records the Events of the change from old to written, the
// status just written for uc.
func recordTransitions(recorder record.EventRecorder, uc *gatewayv1alpha1.UpstreamCluster, old, written *gatewayv1alpha1.UpstreamClusterStatus) {
	ref := reference(uc)
	for _, e := range transitions(old, written) {
		recorder.Event(ref, e.eventType, e.reason, truncate(e.message, maxEventMessageLen))
	}
}

// transitions lists the Events for a status change from old to st: nothing for
// what did not change.
func transitions(old, st *gatewayv1alpha1.UpstreamClusterStatus) []event {
	var out []event

	// Configuration first: it explains what follows.
	oldInsecure := meta.FindStatusCondition(old.Conditions, gatewayv1alpha1.ConditionInsecureTransport)
	if c := meta.FindStatusCondition(st.Conditions, gatewayv1alpha1.ConditionInsecureTransport); c != nil {
		wasInsecure := oldInsecure != nil && oldInsecure.Status == metav1.ConditionTrue
		switch {
		case c.Status == metav1.ConditionTrue && !wasInsecure:
			out = append(out, event{corev1.EventTypeWarning, EventInsecureTransport, c.Message})
		case c.Status != metav1.ConditionTrue && wasInsecure:
			out = append(out, event{corev1.EventTypeNormal, EventCertificatesVerified, "spec.clientConfig.insecure was unset: " + c.Message})
		}
	}

	oldServed := meta.FindStatusCondition(old.Conditions, gatewayv1alpha1.ConditionDispatchResourcesServed)
	if c := meta.FindStatusCondition(st.Conditions, gatewayv1alpha1.ConditionDispatchResourcesServed); c != nil &&
		c.Status == metav1.ConditionFalse && (oldServed == nil || oldServed.Status != c.Status || oldServed.Message != c.Message) {
		out = append(out, event{corev1.EventTypeWarning, EventUnservedResources, c.Message})
	}

	oldDoor := meta.FindStatusCondition(old.Conditions, gatewayv1alpha1.ConditionMemberDoorReady)
	if c := meta.FindStatusCondition(st.Conditions, gatewayv1alpha1.ConditionMemberDoorReady); c != nil &&
		c.Status == metav1.ConditionFalse && (oldDoor == nil || oldDoor.Status != c.Status || oldDoor.Message != c.Message) {
		out = append(out, event{corev1.EventTypeWarning, EventMemberDoorUnavailable, c.Message})
	}

	oldReady := meta.FindStatusCondition(old.Conditions, gatewayv1alpha1.ConditionReady)
	ready := meta.FindStatusCondition(st.Conditions, gatewayv1alpha1.ConditionReady)
	if ready != nil && isProblem(ready) &&
		(oldReady == nil || oldReady.Reason != ready.Reason || oldReady.Message != ready.Message) {
		out = append(out, event{corev1.EventTypeWarning, ready.Reason, "the cluster cannot be used: " + ready.Message})
	}

	// Servers, unless the configuration hides them (a problem keeps the last
	// server health; nothing changes there).
	prev := make(map[string]gatewayv1alpha1.ServerStatus, len(old.Servers))
	for _, s := range old.Servers {
		prev[s.Endpoint] = s
	}
	for _, s := range st.Servers {
		if s.Reason == gatewayv1alpha1.ServerReasonDisabled {
			continue // a spec change, not a health transition
		}
		// A server whose health was not known yet (Healthy unset) becoming
		// healthy is no news: the Ready condition tells when the cluster first
		// serves.
		p, seen := prev[s.Endpoint]
		switch {
		case isFalse(s.Healthy) && (!seen || !isFalse(p.Healthy)):
			out = append(out, event{corev1.EventTypeWarning, EventEndpointUnhealthy,
				fmt.Sprintf("server %s is unhealthy (%s)%s", s.Endpoint, s.Reason, detail(s.Message))})
		case ptr.Deref(s.Healthy, false) && seen && isFalse(p.Healthy) && p.Reason != gatewayv1alpha1.ServerReasonDisabled:
			out = append(out, event{corev1.EventTypeNormal, EventEndpointHealthy,
				fmt.Sprintf("server %s is healthy again (%s)%s", s.Endpoint, s.Reason, detail(s.Message))})
		}
	}

	if ready != nil && !isProblem(ready) {
		wasReady := oldReady != nil && oldReady.Status == metav1.ConditionTrue
		wasUnknown := oldReady != nil && oldReady.Status == metav1.ConditionUnknown
		switch {
		case ready.Status == metav1.ConditionFalse && (oldReady == nil || wasReady || wasUnknown || isProblem(oldReady)):
			out = append(out, event{corev1.EventTypeWarning, EventClusterNotReady, "no server can serve requests: " + ready.Message})
		case ready.Status == metav1.ConditionTrue && wasUnknown:
			out = append(out, event{corev1.EventTypeNormal, EventClusterReady, "the cluster serves requests: " + ready.Message})
		case ready.Status == metav1.ConditionTrue && oldReady != nil && !wasReady:
			out = append(out, event{corev1.EventTypeNormal, EventClusterReady, "the cluster serves requests again: " + ready.Message})
		}
	}
	return out
}

// isProblem reports whether a Ready condition says the configuration cannot be
// used (rather than how healthy the servers are).
func isProblem(ready *metav1.Condition) bool {
	if ready.Status != metav1.ConditionFalse {
		return false
	}
	switch ready.Reason {
	case ReasonNoHealthyServer, ReasonServersHealthy, ReasonSomeServersHealthy:
		return false
	}
	return true
}

// isFalse reports whether healthy is set and false.
func isFalse(healthy *bool) bool { return healthy != nil && !*healthy }

func detail(message string) string {
	if message == "" {
		return ""
	}
	return ": " + message
}
