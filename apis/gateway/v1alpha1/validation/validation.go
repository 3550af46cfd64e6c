// Package validation checks UpstreamClusters and CachedResources; errors carry
// field paths so that the apiserver answers 422 with a message a person can act
// on.
package validation

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/util/cert"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// Options carry the gateway configuration validation depends on.
type Options struct {
	// SecretNamespace is the only namespace credential Secrets may live in: the
	// gateway reads Secrets there and nowhere else.
	SecretNamespace string
}

// ValidateUpstreamCluster validates a whole UpstreamCluster for create.
func ValidateUpstreamCluster(obj *gatewayv1alpha1.UpstreamCluster, opts Options) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(&obj.ObjectMeta, false,
		apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	allErrs = append(allErrs, validateSpec(&obj.Spec, opts, field.NewPath("spec"))...)
	return allErrs
}

// ValidateUpstreamClusterUpdate validates an update of the spec (and metadata).
func ValidateUpstreamClusterUpdate(obj, old *gatewayv1alpha1.UpstreamCluster, opts Options) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&obj.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, validateSpec(&obj.Spec, opts, field.NewPath("spec"))...)
	return allErrs
}

// ValidateUpstreamClusterStatusUpdate validates an update of the status.
func ValidateUpstreamClusterStatusUpdate(obj, old *gatewayv1alpha1.UpstreamCluster) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&obj.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	fldPath := field.NewPath("status")
	if obj.Status.ObservedGeneration < 0 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("observedGeneration"), obj.Status.ObservedGeneration, "must not be negative"))
	}
	allErrs = append(allErrs, metav1validation.ValidateConditions(obj.Status.Conditions, fldPath.Child("conditions"))...)
	seen := sets.New[string]()
	for i, s := range obj.Status.Servers {
		p := fldPath.Child("servers").Index(i).Child("endpoint")
		if seen.Has(s.Endpoint) {
			allErrs = append(allErrs, field.Duplicate(p, s.Endpoint))
		}
		seen.Insert(s.Endpoint)
	}
	allErrs = append(allErrs, validateCacheStatuses(obj.Status.Caches, fldPath.Child("caches"))...)
	return allErrs
}

func validateSpec(spec *gatewayv1alpha1.UpstreamClusterSpec, opts Options, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	allErrs = append(allErrs, validateServers(spec.Servers, fldPath.Child("servers"))...)
	allErrs = append(allErrs, validateClientConfig(&spec.ClientConfig, opts, fldPath.Child("clientConfig"))...)
	if spec.HealthCheck != nil {
		allErrs = append(allErrs, validateHealthCheck(spec.HealthCheck, fldPath.Child("healthCheck"))...)
	}
	if spec.Impersonation != nil {
		allErrs = append(allErrs, validateImpersonation(spec.Impersonation, fldPath.Child("impersonation"))...)
	}
	flowErrs, schemas := validateFlowControl(spec.FlowControl, fldPath.Child("flowControl"))
	allErrs = append(allErrs, flowErrs...)
	allErrs = append(allErrs, validateDispatchPolicies(spec.DispatchPolicies, spec.Servers, schemas, fldPath.Child("dispatchPolicies"))...)
	if spec.SecureServing != nil {
		allErrs = append(allErrs, validateSecureServing(spec.SecureServing, opts, fldPath.Child("secureServing"))...)
	}
	return allErrs
}

// maxTokenReviewTTLSeconds bounds how long a member's answer about a token is
// kept: a revoked token keeps working at the door that long.
const maxTokenReviewTTLSeconds = 24 * 60 * 60

// validateSecureServing checks the member door's settings. That no other
// cluster serves the same names is checked against the stored clusters
// (registry/upstreamcluster), not here.
func validateSecureServing(ss *gatewayv1alpha1.SecureServing, opts Options, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	namesPath := fldPath.Child("serverNames")
	if len(ss.ServerNames) == 0 {
		allErrs = append(allErrs, field.Required(namesPath, "the host names the member's clients use to reach this cluster through the gateway"))
	}
	seen := sets.New[string]()
	for i, name := range ss.ServerNames {
		p := namesPath.Index(i)
		switch {
		case net.ParseIP(name) != nil:
			allErrs = append(allErrs, field.Invalid(p, name, "must be a host name, not an IP address: clients send no server name (SNI) for an IP address"))
		case seen.Has(name):
			allErrs = append(allErrs, field.Duplicate(p, name))
		default:
			for _, msg := range apimachineryvalidation.NameIsDNSSubdomain(name, false) {
				allErrs = append(allErrs, field.Invalid(p, name, msg))
			}
		}
		seen.Insert(name)
	}
	allErrs = append(allErrs, validateSecretRef(ss.SecretRef, "the Secret with the door's serving certificate (tls.crt, tls.key) and client CA (ca.crt)", opts, fldPath.Child("secretRef"))...)
	switch ss.ClientCA {
	case "", gatewayv1alpha1.ClientCAFromSecret, gatewayv1alpha1.ClientCAFromMember:
	default:
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("clientCA"), ss.ClientCA,
			[]gatewayv1alpha1.ClientCASource{gatewayv1alpha1.ClientCAFromSecret, gatewayv1alpha1.ClientCAFromMember}))
	}
	if tr := ss.TokenReview; tr != nil {
		for _, ttl := range []struct {
			name  string
			value int32
		}{{"cacheTTLSeconds", tr.CacheTTLSeconds}, {"failureCacheTTLSeconds", tr.FailureCacheTTLSeconds}} {
			if ttl.value < 0 || ttl.value > maxTokenReviewTTLSeconds {
				allErrs = append(allErrs, field.Invalid(fldPath.Child("tokenReview", ttl.name), ttl.value,
					fmt.Sprintf("must be between 1 and %d seconds (0 takes the default)", maxTokenReviewTTLSeconds)))
			}
		}
	}
	return allErrs
}

func validateServers(servers []gatewayv1alpha1.UpstreamServer, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(servers) == 0 {
		return append(allErrs, field.Required(fldPath, "at least one server endpoint is required"))
	}
	seen := sets.New[string]()
	for i, s := range servers {
		p := fldPath.Index(i).Child("endpoint")
		if err := ValidateEndpoint(s.Endpoint); err != nil {
			allErrs = append(allErrs, field.Invalid(p, s.Endpoint, err.Error()))
			continue
		}
		key := canonicalEndpoint(s.Endpoint)
		if seen.Has(key) {
			allErrs = append(allErrs, field.Duplicate(p, s.Endpoint))
		}
		seen.Insert(key)
	}
	return allErrs
}

// canonicalEndpoint is the form two endpoints are compared in: the same server
// written as https://A and https://a:443 is one server.
func canonicalEndpoint(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return endpoint
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	return net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// ValidateEndpoint checks that endpoint is an https URL naming only a host and an
// optional port: the gateway appends the member path itself, so a path, query,
// fragment or user info would silently change where requests go.
func ValidateEndpoint(endpoint string) error {
	u, err := url.Parse(endpoint)
	switch {
	case (err != nil && !strings.Contains(endpoint, "://")) || (err == nil && u.Scheme == ""):
		// url.Parse fails on "192.0.2.10:6443" with an error that does not say
		// what is expected, and reads "member.example.com" as a path.
		return fmt.Errorf("must be an https URL such as https://192.0.2.10:6443: the scheme is missing")
	case err != nil:
		return fmt.Errorf("must be an https URL such as https://192.0.2.10:6443: %v", err)
	case u.Scheme != "https":
		return fmt.Errorf("must be an https URL such as https://192.0.2.10:6443")
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("must name a host")
	case u.User != nil:
		return fmt.Errorf("must not contain user info: put credentials in the Secret of spec.clientConfig.secretRef")
	case u.Path != "" || u.RawPath != "" || u.Opaque != "":
		return fmt.Errorf("must not have a path: the proxied path is appended by the gateway")
	}
	return checkQueryFragmentPort(u)
}

func validateClientConfig(cc *gatewayv1alpha1.ClientConfig, opts Options, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	allErrs = append(allErrs, validateSecretRef(cc.SecretRef, "the Secret holding the gateway's credential toward the member", opts, fldPath.Child("secretRef"))...)
	if ref := cc.CacheSecretRef; ref != nil {
		refPath := fldPath.Child("cacheSecretRef")
		allErrs = append(allErrs, validateSecretRef(*ref, "the Secret holding the read-only identity that fills the gateway's cache of the member", opts, refPath)...)
		if *ref == cc.SecretRef {
			allErrs = append(allErrs, field.Invalid(refPath.Child("name"), ref.Name,
				"must name a Secret other than secretRef's: the cache reads with an identity that may only list and watch, never with the gateway's impersonating credential"))
		}
	}
	if len(cc.CAData) > 0 {
		if _, err := cert.ParseCertsPEM(cc.CAData); err != nil {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("caData"), "<PEM data>", fmt.Sprintf("must be a PEM bundle of CA certificates: %v", err)))
		}
	}
	allErrs = append(allErrs, validateServerName(cc.ServerName, fldPath.Child("serverName"))...)
	if cc.Insecure && (len(cc.CAData) > 0 || cc.ServerName != "") {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("insecure"), cc.Insecure, "must not be set together with caData or serverName: verification is either on or off"))
	}
	if cc.ProxyURL != "" {
		if err := ValidateProxyURL(cc.ProxyURL); err != nil {
			shown := cc.ProxyURL
			if u, perr := url.Parse(cc.ProxyURL); perr == nil && u.User != nil {
				shown = u.Redacted() // never echo a password back
			}
			allErrs = append(allErrs, field.Invalid(fldPath.Child("proxyURL"), shown, err.Error()))
		}
	}
	if cc.Konnectivity != nil {
		allErrs = append(allErrs, validateKonnectivity(cc.Konnectivity, opts, fldPath.Child("konnectivity"))...)
		if cc.ProxyURL != "" {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("konnectivity"), "<konnectivity>",
				"must not be set together with proxyURL: connections go either through an egress proxy or through a konnectivity tunnel"))
		}
	}
	return allErrs
}

func validateSecretRef(ref gatewayv1alpha1.SecretReference, what string, opts Options, refPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if ref.Name == "" {
		allErrs = append(allErrs, field.Required(refPath.Child("name"), what))
	} else {
		for _, msg := range apimachineryvalidation.NameIsDNSSubdomain(ref.Name, false) {
			allErrs = append(allErrs, field.Invalid(refPath.Child("name"), ref.Name, msg))
		}
	}
	switch {
	case ref.Namespace == "":
		allErrs = append(allErrs, field.Required(refPath.Child("namespace"), fmt.Sprintf("the gateway reads credential Secrets in namespace %q", opts.SecretNamespace)))
	case opts.SecretNamespace != "" && ref.Namespace != opts.SecretNamespace:
		allErrs = append(allErrs, field.NotSupported(refPath.Child("namespace"), ref.Namespace, []string{opts.SecretNamespace}))
	}
	return allErrs
}

func validateServerName(name string, fldPath *field.Path) field.ErrorList {
	if name != "" && (strings.Contains(name, ":") && net.ParseIP(name) == nil || strings.ContainsAny(name, "/ ")) {
		return field.ErrorList{field.Invalid(fldPath, name, "must be a host name or an IP address, without port")}
	}
	return nil
}

// validateKonnectivity checks the tunnel's settings. Nothing is resolved here:
// with a tunnel, the servers' host names are resolved by the agent in the
// member, and the konnectivity server's by the gateway when it dials.
func validateKonnectivity(k *gatewayv1alpha1.KonnectivityConfig, opts Options, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	addrPath, addrsPath := fldPath.Child("address"), fldPath.Child("addresses")
	switch {
	case k.Address == "" && len(k.Addresses) == 0:
		allErrs = append(allErrs, field.Required(addrPath, "host:port of the konnectivity server's frontend gRPC port (its --server-port), or addresses with one per konnectivity server"))
	case k.Address != "" && len(k.Addresses) > 0:
		allErrs = append(allErrs, field.Invalid(addrPath, k.Address, "must not be set together with addresses: list every konnectivity server in addresses"))
	case k.Address != "":
		allErrs = append(allErrs, validateKonnectivityAddress(k.Address, addrPath)...)
	}
	seen := map[string]bool{}
	for i, a := range k.Addresses {
		if seen[a] {
			allErrs = append(allErrs, field.Duplicate(addrsPath.Index(i), a))
			continue
		}
		seen[a] = true
		allErrs = append(allErrs, validateKonnectivityAddress(a, addrsPath.Index(i))...)
	}
	allErrs = append(allErrs, validateSecretRef(k.SecretRef, "the Secret with tls.crt, tls.key and ca.crt for mutual TLS with the konnectivity server", opts, fldPath.Child("secretRef"))...)
	allErrs = append(allErrs, validateServerName(k.ServerName, fldPath.Child("serverName"))...)
	return allErrs
}

func validateKonnectivityAddress(address string, fldPath *field.Path) field.ErrorList {
	if host, port, err := net.SplitHostPort(address); err != nil || host == "" || strings.ContainsAny(address, "/ ") {
		return field.ErrorList{field.Invalid(fldPath, address, "must be host:port of the konnectivity server's frontend gRPC port, such as konnectivity.gateway.svc:8090")}
	} else if p, err := net.LookupPort("tcp", port); err != nil || p == 0 || strings.HasPrefix(port, "0") {
		return field.ErrorList{field.Invalid(fldPath, address, fmt.Sprintf("has an invalid port %q", port))}
	}
	return nil
}

// ValidateProxyURL checks that proxyURL is an http, https or socks5 URL naming
// only a host and an optional port. Credentials belong in the Secret, never in
// the object, which every reader of UpstreamClusters sees.
func ValidateProxyURL(proxyURL string) error {
	const example = "such as http://proxy.example.com:3128 or socks5://192.0.2.20:1080"
	u, err := url.Parse(proxyURL)
	switch {
	case err != nil && !strings.Contains(proxyURL, "://") || err == nil && u.Scheme == "":
		return fmt.Errorf("must be an http, https or socks5 URL %s: the scheme is missing", example)
	case err != nil:
		return fmt.Errorf("must be an http, https or socks5 URL %s: %v", example, err)
	case u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "socks5":
		return fmt.Errorf("has scheme %q: must be http, https or socks5, %s", u.Scheme, example)
	case u.User != nil:
		return fmt.Errorf("must not contain user info: put the proxy's credentials in keys proxy-username and proxy-password of the Secret of spec.clientConfig.secretRef")
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("must name a host")
	case u.Path != "" || u.RawPath != "" || u.Opaque != "":
		return fmt.Errorf("must not have a path")
	}
	return checkQueryFragmentPort(u)
}

func validateHealthCheck(hc *gatewayv1alpha1.HealthCheck, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if !strings.HasPrefix(hc.Path, "/") || strings.ContainsAny(hc.Path, "?#") {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("path"), hc.Path, "must be an absolute path without query, such as /readyz"))
	}
	positive := func(name string, v int32) {
		if v <= 0 {
			allErrs = append(allErrs, field.Invalid(fldPath.Child(name), v, "must be greater than zero"))
		}
	}
	positive("intervalSeconds", hc.IntervalSeconds)
	positive("timeoutSeconds", hc.TimeoutSeconds)
	positive("unhealthyThreshold", hc.UnhealthyThreshold)
	positive("healthyThreshold", hc.HealthyThreshold)
	if hc.TimeoutSeconds > 0 && hc.IntervalSeconds > 0 && hc.TimeoutSeconds >= hc.IntervalSeconds {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("timeoutSeconds"), hc.TimeoutSeconds, "must be less than intervalSeconds"))
	}
	return allErrs
}

func validateImpersonation(p *gatewayv1alpha1.ImpersonationPolicy, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for _, prefix := range []struct{ name, value string }{{"userPrefix", p.UserPrefix}, {"groupPrefix", p.GroupPrefix}} {
		if strings.ContainsAny(prefix.value, "\r\n") || strings.HasPrefix(prefix.value, "system:") {
			allErrs = append(allErrs, field.Invalid(fldPath.Child(prefix.name), prefix.value, "must not contain line breaks nor start with system:"))
		}
	}
	allErrs = append(allErrs, validateNameFilter(p.Groups, fldPath.Child("groups"))...)
	allErrs = append(allErrs, validateNameFilter(p.Extras, fldPath.Child("extras"))...)
	return allErrs
}

func validateNameFilter(f *gatewayv1alpha1.NameFilter, fldPath *field.Path) field.ErrorList {
	if f == nil {
		return nil
	}
	var allErrs field.ErrorList
	for i, v := range f.Allow {
		if v == "" {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("allow").Index(i), v, "must not be empty"))
		}
	}
	for i, v := range f.Deny {
		if v == "" {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("deny").Index(i), v, "must not be empty"))
		}
	}
	return allErrs
}
