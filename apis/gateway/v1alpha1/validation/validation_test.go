package validation_test

import (
	"encoding/pem"
	"fmt"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1/validation"
	"github.com/kubewharf/kube-gateway/test/testca"
)

const secretNamespace = "kube-gateway"

var opts = validation.Options{SecretNamespace: secretNamespace}

// fieldErr is the part of a field.Error the tests compare: its type and path.
type fieldErr struct {
	Type  field.ErrorType
	Field string
}

func (e fieldErr) String() string { return fmt.Sprintf("%s %s", e.Type, e.Field) }

func summarize(errs field.ErrorList) []fieldErr {
	out := make([]fieldErr, 0, len(errs))
	for _, e := range errs {
		out = append(out, fieldErr{Type: e.Type, Field: e.Field})
	}
	return out
}

func assertErrors(t *testing.T, got field.ErrorList, want []fieldErr) {
	t.Helper()
	g := summarize(got)
	if len(g) != len(want) {
		t.Fatalf("got %d errors %v, want %d %v\nfull errors: %v", len(g), g, len(want), want, got.ToAggregate())
	}
	for i := range want {
		if g[i] != want[i] {
			t.Errorf("error %d: got %v, want %v\nfull errors: %v", i, g[i], want[i], got.ToAggregate())
		}
	}
}

// valid returns an UpstreamCluster that passes validation, with defaults applied.
func valid() *gatewayv1alpha1.UpstreamCluster {
	uc := &gatewayv1alpha1.UpstreamCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "member-a", ResourceVersion: "1"},
		Spec: gatewayv1alpha1.UpstreamClusterSpec{
			Servers: []gatewayv1alpha1.UpstreamServer{
				{Endpoint: "https://192.0.2.10:6443"},
				{Endpoint: "https://192.0.2.11:6443", Disabled: true},
			},
			ClientConfig: gatewayv1alpha1.ClientConfig{
				SecretRef: gatewayv1alpha1.SecretReference{Namespace: secretNamespace, Name: "member-a"},
			},
		},
	}
	gatewayv1alpha1.SetObjectDefaults_UpstreamCluster(uc)
	return uc
}

func TestValidateEndpoint(t *testing.T) {
	tests := []struct {
		endpoint string
		wantErr  string // substring; "" = valid
	}{
		{"https://192.0.2.10:6443", ""},
		{"https://192.0.2.10", ""},
		{"https://member.example.com:443", ""},
		{"HTTPS://member.example.com", ""},
		{"https://[2001:db8::1]:6443", ""},
		{"https://[2001:db8::1]", ""},
		{"https://[::1]:65535", ""},
		{"http://192.0.2.10:6443", "https URL"},
		{"192.0.2.10:6443", "must be an https URL such as https://192.0.2.10:6443: the scheme is missing"},
		{"member.example.com", "the scheme is missing"},
		{"", "https URL"},
		{"https://", "host"},
		{"https://:6443", "host"},
		{"https://192.0.2.10:6443/", "path"},
		{"https://192.0.2.10:6443/prefix", "path"},
		{"https:192.0.2.10", "host"}, // opaque: no host
		{"https://192.0.2.10:6443?a=b", "query"},
		{"https://192.0.2.10:6443?", "query"},
		{"https://192.0.2.10:6443#frag", "fragment"},
		{"https://user:secret@192.0.2.10:6443", "user info"},
		{"https://user@192.0.2.10:6443", "user info"},
		{"https://192.0.2.10:0", "invalid port"},
		{"https://192.0.2.10:06443", "invalid port"},
		{"https://192.0.2.10:65536", "invalid port"},
		{"https://192.0.2.10:99999", "invalid port"},
		{"https://192.0.2.10:abc", "URL"},
		{"https://2001:db8::1:6443", "URL"}, // IPv6 literal without brackets
	}
	for _, tt := range tests {
		t.Run(tt.endpoint, func(t *testing.T) {
			err := validation.ValidateEndpoint(tt.endpoint)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("ValidateEndpoint(%q) = %v, want valid", tt.endpoint, err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("ValidateEndpoint(%q) = nil, want an error containing %q", tt.endpoint, tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("ValidateEndpoint(%q) = %v, want an error containing %q", tt.endpoint, err, tt.wantErr)
			}
			if strings.Contains(tt.endpoint, "secret") && err != nil && strings.Contains(err.Error(), "secret@") {
				t.Errorf("error repeats the user info of the endpoint: %v", err)
			}
		})
	}
}

func TestValidateUpstreamCluster(t *testing.T) {
	ca := testca.New(t, "test-ca").PEM
	tests := []struct {
		name   string
		mutate func(*gatewayv1alpha1.UpstreamCluster)
		opts   *validation.Options // nil: opts
		want   []fieldErr
	}{
		{name: "valid", mutate: func(*gatewayv1alpha1.UpstreamCluster) {}},
		{
			name: "valid without healthCheck and with every optional field",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.HealthCheck = nil
				uc.Spec.ClientConfig.CAData = ca
				uc.Spec.ClientConfig.ServerName = "member.example.com"
				uc.Spec.Impersonation = &gatewayv1alpha1.ImpersonationPolicy{
					UserPrefix: "hub:", GroupPrefix: "hub:",
					Groups: &gatewayv1alpha1.NameFilter{Allow: []string{"dev"}, Deny: []string{"system:masters"}},
					Extras: &gatewayv1alpha1.NameFilter{Deny: []string{"secret"}},
				}
				uc.Spec.FlowControl = &gatewayv1alpha1.FlowControl{} // empty: nothing to enforce
				uc.Spec.Servers = append(uc.Spec.Servers, gatewayv1alpha1.UpstreamServer{Endpoint: "https://[2001:db8::1]:6443"})
			},
		},

		// secureServing: the member door
		{
			name: "member door",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.SecureServing = &gatewayv1alpha1.SecureServing{ServerNames: []string{"member-a.example.com", "member-a"},
					SecretRef: gatewayv1alpha1.SecretReference{Namespace: "kube-gateway", Name: "member-a-door"}}
			},
		},
		{
			name: "member door without names or Secret",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.SecureServing = &gatewayv1alpha1.SecureServing{}
			},
			want: []fieldErr{
				{field.ErrorTypeRequired, "spec.secureServing.serverNames"},
				{field.ErrorTypeRequired, "spec.secureServing.secretRef.name"},
				{field.ErrorTypeRequired, "spec.secureServing.secretRef.namespace"},
			},
		},
		{
			name: "member door names: an IP, upper case, a duplicate; a Secret elsewhere",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.SecureServing = &gatewayv1alpha1.SecureServing{ServerNames: []string{"127.0.0.1", "Member-A.example.com", "a.example.com", "a.example.com"},
					SecretRef: gatewayv1alpha1.SecretReference{Namespace: "default", Name: "door"}}
			},
			want: []fieldErr{
				{field.ErrorTypeInvalid, "spec.secureServing.serverNames[0]"},
				{field.ErrorTypeInvalid, "spec.secureServing.serverNames[1]"},
				{field.ErrorTypeDuplicate, "spec.secureServing.serverNames[3]"},
				{field.ErrorTypeNotSupported, "spec.secureServing.secretRef.namespace"},
			},
		},

		{
			name: "member door token review lifetimes out of range",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.SecureServing = &gatewayv1alpha1.SecureServing{ServerNames: []string{"member-a.example.com"},
					SecretRef:   gatewayv1alpha1.SecretReference{Namespace: "kube-gateway", Name: "door"},
					TokenReview: &gatewayv1alpha1.TokenReview{CacheTTLSeconds: -1, FailureCacheTTLSeconds: 86401}}
			},
			want: []fieldErr{
				{field.ErrorTypeInvalid, "spec.secureServing.tokenReview.cacheTTLSeconds"},
				{field.ErrorTypeInvalid, "spec.secureServing.tokenReview.failureCacheTTLSeconds"},
			},
		},

		// metadata
		{
			name:   "missing name",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Name = "" },
			want:   []fieldErr{{field.ErrorTypeRequired, "metadata.name"}},
		},
		{
			name:   "invalid name",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Name = "Member_A" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "metadata.name"}},
		},
		{
			name:   "namespace on a cluster-scoped object",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Namespace = "default" },
			want:   []fieldErr{{field.ErrorTypeForbidden, "metadata.namespace"}},
		},

		// servers
		{
			name:   "no servers",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.Servers = nil },
			want:   []fieldErr{{field.ErrorTypeRequired, "spec.servers"}},
		},
		{
			name:   "http scheme",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.Servers[1].Endpoint = "http://192.0.2.11:6443" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.servers[1].endpoint"}},
		},
		{
			name:   "path",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.Servers[0].Endpoint = "https://192.0.2.10:6443/api" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.servers[0].endpoint"}},
		},
		{
			name:   "query",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.Servers[1].Endpoint = "https://192.0.2.11:6443?x=y" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.servers[1].endpoint"}},
		},
		{
			name:   "fragment",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.Servers[1].Endpoint = "https://192.0.2.11:6443#x" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.servers[1].endpoint"}},
		},
		{
			name: "user info",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.Servers[1].Endpoint = "https://admin:pw@192.0.2.11:6443"
			},
			want: []fieldErr{{field.ErrorTypeInvalid, "spec.servers[1].endpoint"}},
		},
		{
			name:   "missing host",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.Servers[1].Endpoint = "https://:6443" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.servers[1].endpoint"}},
		},
		{
			name:   "bad port",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.Servers[1].Endpoint = "https://192.0.2.11:70000" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.servers[1].endpoint"}},
		},
		{
			name:   "IPv6 literal",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.Servers[1].Endpoint = "https://[2001:db8::11]:6443" },
		},
		{
			name: "duplicate endpoints, the disabled one included",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.Servers = append(uc.Spec.Servers,
					gatewayv1alpha1.UpstreamServer{Endpoint: "https://192.0.2.10:6443"},
					gatewayv1alpha1.UpstreamServer{Endpoint: "https://192.0.2.11:6443"})
			},
			want: []fieldErr{
				{field.ErrorTypeDuplicate, "spec.servers[2].endpoint"},
				{field.ErrorTypeDuplicate, "spec.servers[3].endpoint"},
			},
		},
		{
			name: "every server checked",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.Servers[0].Endpoint = "http://192.0.2.10"
				uc.Spec.Servers[1].Endpoint = "https://192.0.2.11/x"
			},
			want: []fieldErr{
				{field.ErrorTypeInvalid, "spec.servers[0].endpoint"},
				{field.ErrorTypeInvalid, "spec.servers[1].endpoint"},
			},
		},

		// clientConfig.secretRef
		{
			name:   "secretRef name required",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.SecretRef.Name = "" },
			want:   []fieldErr{{field.ErrorTypeRequired, "spec.clientConfig.secretRef.name"}},
		},
		{
			name:   "secretRef name invalid",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.SecretRef.Name = "Not_A_Name" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.clientConfig.secretRef.name"}},
		},
		{
			name:   "secretRef namespace required",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.SecretRef.Namespace = "" },
			want:   []fieldErr{{field.ErrorTypeRequired, "spec.clientConfig.secretRef.namespace"}},
		},
		{
			name:   "secretRef namespace other than the gateway's",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.SecretRef.Namespace = "kube-system" },
			want:   []fieldErr{{field.ErrorTypeNotSupported, "spec.clientConfig.secretRef.namespace"}},
		},
		{
			name:   "secretRef namespace free when the gateway has no secret namespace",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.SecretRef.Namespace = "kube-system" },
			opts:   &validation.Options{},
		},
		{
			name: "secretRef both missing",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.ClientConfig.SecretRef = gatewayv1alpha1.SecretReference{}
			},
			want: []fieldErr{
				{field.ErrorTypeRequired, "spec.clientConfig.secretRef.name"},
				{field.ErrorTypeRequired, "spec.clientConfig.secretRef.namespace"},
			},
		},

		// clientConfig.cacheSecretRef: the cache's read-only identity
		{
			name: "cacheSecretRef",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.ClientConfig.CacheSecretRef = &gatewayv1alpha1.SecretReference{Namespace: secretNamespace, Name: "member-a-cache"}
			},
		},
		{
			name: "cacheSecretRef empty",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.ClientConfig.CacheSecretRef = &gatewayv1alpha1.SecretReference{}
			},
			want: []fieldErr{
				{field.ErrorTypeRequired, "spec.clientConfig.cacheSecretRef.name"},
				{field.ErrorTypeRequired, "spec.clientConfig.cacheSecretRef.namespace"},
			},
		},
		{
			name: "cacheSecretRef elsewhere, with an invalid name",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.ClientConfig.CacheSecretRef = &gatewayv1alpha1.SecretReference{Namespace: "default", Name: "Cache_Reader"}
			},
			want: []fieldErr{
				{field.ErrorTypeInvalid, "spec.clientConfig.cacheSecretRef.name"},
				{field.ErrorTypeNotSupported, "spec.clientConfig.cacheSecretRef.namespace"},
			},
		},
		{
			name: "cacheSecretRef naming the impersonating credential's Secret",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				ref := uc.Spec.ClientConfig.SecretRef
				uc.Spec.ClientConfig.CacheSecretRef = &ref
			},
			want: []fieldErr{{field.ErrorTypeInvalid, "spec.clientConfig.cacheSecretRef.name"}},
		},

		// clientConfig.konnectivity
		{
			name: "konnectivity with a server only the agent resolves",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.Servers = []gatewayv1alpha1.UpstreamServer{{Endpoint: "https://kubernetes.default.svc"}}
				uc.Spec.ClientConfig.Konnectivity = &gatewayv1alpha1.KonnectivityConfig{
					Address:    "konnectivity.gateway.invalid:8090",
					SecretRef:  gatewayv1alpha1.SecretReference{Namespace: uc.Spec.ClientConfig.SecretRef.Namespace, Name: "konnectivity-client"},
					ServerName: "konnectivity",
				}
			},
		},
		{
			name: "konnectivity address, secretRef and serverName",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.ClientConfig.Konnectivity = &gatewayv1alpha1.KonnectivityConfig{
					Address:    "konnectivity.example.com",
					SecretRef:  gatewayv1alpha1.SecretReference{Namespace: "kube-system"},
					ServerName: "konnectivity:8090",
				}
			},
			want: []fieldErr{
				{field.ErrorTypeInvalid, "spec.clientConfig.konnectivity.address"},
				{field.ErrorTypeRequired, "spec.clientConfig.konnectivity.secretRef.name"},
				{field.ErrorTypeNotSupported, "spec.clientConfig.konnectivity.secretRef.namespace"},
				{field.ErrorTypeInvalid, "spec.clientConfig.konnectivity.serverName"},
			},
		},
		{
			name: "konnectivity and proxyURL exclude each other",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.ClientConfig.ProxyURL = "http://proxy.example.com:3128"
				uc.Spec.ClientConfig.Konnectivity = &gatewayv1alpha1.KonnectivityConfig{
					Address:   "konnectivity:8090",
					SecretRef: gatewayv1alpha1.SecretReference{Namespace: uc.Spec.ClientConfig.SecretRef.Namespace, Name: "k"},
				}
			},
			want: []fieldErr{{field.ErrorTypeInvalid, "spec.clientConfig.konnectivity"}},
		},
		{
			name: "konnectivity address required, port checked",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.ClientConfig.Konnectivity = &gatewayv1alpha1.KonnectivityConfig{
					SecretRef: gatewayv1alpha1.SecretReference{Namespace: uc.Spec.ClientConfig.SecretRef.Namespace, Name: "k"},
				}
			},
			want: []fieldErr{{field.ErrorTypeRequired, "spec.clientConfig.konnectivity.address"}},
		},
		{
			name: "konnectivity address with a bad port",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.ClientConfig.Konnectivity = &gatewayv1alpha1.KonnectivityConfig{
					Address:   "konnectivity:0",
					SecretRef: gatewayv1alpha1.SecretReference{Namespace: uc.Spec.ClientConfig.SecretRef.Namespace, Name: "k"},
				}
			},
			want: []fieldErr{{field.ErrorTypeInvalid, "spec.clientConfig.konnectivity.address"}},
		},
		{
			name: "konnectivity addresses of several servers",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.ClientConfig.Konnectivity = &gatewayv1alpha1.KonnectivityConfig{
					Addresses: []string{"konnectivity-0.konnectivity.gateway.svc:8090", "konnectivity-1.konnectivity.gateway.svc:8090"},
					SecretRef: gatewayv1alpha1.SecretReference{Namespace: uc.Spec.ClientConfig.SecretRef.Namespace, Name: "k"},
				}
			},
		},
		{
			name: "konnectivity addresses checked one by one, not with address",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.ClientConfig.Konnectivity = &gatewayv1alpha1.KonnectivityConfig{
					Address:   "konnectivity:8090",
					Addresses: []string{"konnectivity-0:8090", "konnectivity-1", "konnectivity-0:8090"},
					SecretRef: gatewayv1alpha1.SecretReference{Namespace: uc.Spec.ClientConfig.SecretRef.Namespace, Name: "k"},
				}
			},
			want: []fieldErr{
				{field.ErrorTypeInvalid, "spec.clientConfig.konnectivity.address"},
				{field.ErrorTypeInvalid, "spec.clientConfig.konnectivity.addresses[1]"},
				{field.ErrorTypeDuplicate, "spec.clientConfig.konnectivity.addresses[2]"},
			},
		},

		// clientConfig TLS
		{
			name:   "caData valid PEM",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.CAData = ca },
		},
		{
			name:   "caData not PEM",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.CAData = []byte("not a certificate") },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.clientConfig.caData"}},
		},
		{
			name: "caData PEM of something else than a certificate",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.ClientConfig.CAData = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("garbage")})
			},
			want: []fieldErr{{field.ErrorTypeInvalid, "spec.clientConfig.caData"}},
		},
		{
			name:   "serverName host",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.ServerName = "kubernetes.default.svc" },
		},
		{
			name:   "serverName IPv4",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.ServerName = "192.0.2.10" },
		},
		{
			name:   "serverName IPv6",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.ServerName = "2001:db8::1" },
		},
		{
			name:   "serverName with port",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.ServerName = "member.example.com:6443" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.clientConfig.serverName"}},
		},
		{
			name:   "serverName with slash",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.ServerName = "member.example.com/x" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.clientConfig.serverName"}},
		},
		{
			name:   "serverName with space",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.ServerName = "member example" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.clientConfig.serverName"}},
		},
		{
			name:   "insecure alone",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.Insecure = true },
		},
		{
			name: "insecure with caData",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.ClientConfig.Insecure = true
				uc.Spec.ClientConfig.CAData = ca
			},
			want: []fieldErr{{field.ErrorTypeInvalid, "spec.clientConfig.insecure"}},
		},
		{
			name: "insecure with serverName",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.ClientConfig.Insecure = true
				uc.Spec.ClientConfig.ServerName = "member.example.com"
			},
			want: []fieldErr{{field.ErrorTypeInvalid, "spec.clientConfig.insecure"}},
		},

		// clientConfig proxyURL
		{
			name: "proxyURL http",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.ClientConfig.ProxyURL = "http://proxy.example.com:3128"
			},
		},
		{
			name:   "proxyURL https without port",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.ProxyURL = "https://proxy.example.com" },
		},
		{
			name:   "proxyURL socks5 IP",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.ProxyURL = "socks5://192.0.2.20:1080" },
		},
		{
			name: "proxyURL IPv6",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.ClientConfig.ProxyURL = "http://[2001:db8::20]:3128"
			},
		},
		{
			name:   "proxyURL without scheme",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.ProxyURL = "proxy.example.com:3128" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.clientConfig.proxyURL"}},
		},
		{
			name:   "proxyURL scheme socks4",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.ProxyURL = "socks4://192.0.2.20:1080" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.clientConfig.proxyURL"}},
		},
		{
			name:   "proxyURL scheme https-less ftp",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.ProxyURL = "ftp://192.0.2.20" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.clientConfig.proxyURL"}},
		},
		{
			name: "proxyURL with user info",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.ClientConfig.ProxyURL = "http://user:secret@proxy.example.com:3128"
			},
			want: []fieldErr{{field.ErrorTypeInvalid, "spec.clientConfig.proxyURL"}},
		},
		{
			name:   "proxyURL without host",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.ClientConfig.ProxyURL = "http://:3128" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.clientConfig.proxyURL"}},
		},
		{
			name: "proxyURL with path",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.ClientConfig.ProxyURL = "http://proxy.example.com:3128/x"
			},
			want: []fieldErr{{field.ErrorTypeInvalid, "spec.clientConfig.proxyURL"}},
		},
		{
			name: "proxyURL with query",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.ClientConfig.ProxyURL = "http://proxy.example.com:3128?a=b"
			},
			want: []fieldErr{{field.ErrorTypeInvalid, "spec.clientConfig.proxyURL"}},
		},
		{
			name: "proxyURL with fragment",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.ClientConfig.ProxyURL = "http://proxy.example.com:3128#f"
			},
			want: []fieldErr{{field.ErrorTypeInvalid, "spec.clientConfig.proxyURL"}},
		},
		{
			name: "proxyURL bad port",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.ClientConfig.ProxyURL = "http://proxy.example.com:99999"
			},
			want: []fieldErr{{field.ErrorTypeInvalid, "spec.clientConfig.proxyURL"}},
		},

		// healthCheck
		{
			name:   "healthCheck path empty",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.HealthCheck.Path = "" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.healthCheck.path"}},
		},
		{
			name:   "healthCheck path relative",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.HealthCheck.Path = "readyz" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.healthCheck.path"}},
		},
		{
			name:   "healthCheck path with query",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.HealthCheck.Path = "/readyz?verbose" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.healthCheck.path"}},
		},
		{
			name:   "healthCheck path with fragment",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.HealthCheck.Path = "/readyz#x" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "spec.healthCheck.path"}},
		},
		{
			name:   "healthCheck livez",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.HealthCheck.Path = "/livez" },
		},
		{
			name: "healthCheck zero and negative values",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.HealthCheck.IntervalSeconds = 0
				uc.Spec.HealthCheck.TimeoutSeconds = -1
				uc.Spec.HealthCheck.UnhealthyThreshold = 0
				uc.Spec.HealthCheck.HealthyThreshold = -3
			},
			want: []fieldErr{
				{field.ErrorTypeInvalid, "spec.healthCheck.intervalSeconds"},
				{field.ErrorTypeInvalid, "spec.healthCheck.timeoutSeconds"},
				{field.ErrorTypeInvalid, "spec.healthCheck.unhealthyThreshold"},
				{field.ErrorTypeInvalid, "spec.healthCheck.healthyThreshold"},
			},
		},
		{
			name: "healthCheck timeout equal to interval",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.HealthCheck.IntervalSeconds, uc.Spec.HealthCheck.TimeoutSeconds = 3, 3
			},
			want: []fieldErr{{field.ErrorTypeInvalid, "spec.healthCheck.timeoutSeconds"}},
		},
		{
			name: "healthCheck timeout above interval",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.HealthCheck.IntervalSeconds, uc.Spec.HealthCheck.TimeoutSeconds = 3, 10
			},
			want: []fieldErr{{field.ErrorTypeInvalid, "spec.healthCheck.timeoutSeconds"}},
		},
		{
			name: "healthCheck timeout just below interval",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.HealthCheck.IntervalSeconds, uc.Spec.HealthCheck.TimeoutSeconds = 3, 2
			},
		},

		// impersonation
		{
			name: "impersonation userPrefix system:",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.Impersonation = &gatewayv1alpha1.ImpersonationPolicy{UserPrefix: "system:hub:"}
			},
			want: []fieldErr{{field.ErrorTypeInvalid, "spec.impersonation.userPrefix"}},
		},
		{
			name: "impersonation groupPrefix system:",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.Impersonation = &gatewayv1alpha1.ImpersonationPolicy{GroupPrefix: "system:"}
			},
			want: []fieldErr{{field.ErrorTypeInvalid, "spec.impersonation.groupPrefix"}},
		},
		{
			name: "impersonation prefixes with line breaks",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.Impersonation = &gatewayv1alpha1.ImpersonationPolicy{UserPrefix: "hub\n", GroupPrefix: "hub\r"}
			},
			want: []fieldErr{
				{field.ErrorTypeInvalid, "spec.impersonation.userPrefix"},
				{field.ErrorTypeInvalid, "spec.impersonation.groupPrefix"},
			},
		},
		{
			name: "impersonation empty filter entries",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.Impersonation = &gatewayv1alpha1.ImpersonationPolicy{
					Groups: &gatewayv1alpha1.NameFilter{Allow: []string{"dev", ""}, Deny: []string{""}},
					Extras: &gatewayv1alpha1.NameFilter{Allow: []string{""}, Deny: []string{"x", "y", ""}},
				}
			},
			want: []fieldErr{
				{field.ErrorTypeInvalid, "spec.impersonation.groups.allow[1]"},
				{field.ErrorTypeInvalid, "spec.impersonation.groups.deny[0]"},
				{field.ErrorTypeInvalid, "spec.impersonation.extras.allow[0]"},
				{field.ErrorTypeInvalid, "spec.impersonation.extras.deny[2]"},
			},
		},
		{
			name: "impersonation empty policy",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.Impersonation = &gatewayv1alpha1.ImpersonationPolicy{}
			},
		},

		// flow control and dispatch policies: see TestValidateDispatchPolicies
		{
			name: "a policy and a schema",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.FlowControl = &gatewayv1alpha1.FlowControl{FlowControlSchemas: []gatewayv1alpha1.FlowControlSchema{
					{Name: "free", Exempt: &gatewayv1alpha1.ExemptFlowControl{}},
				}}
				uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{{
					Name:                  "list-pods",
					Rules:                 []gatewayv1alpha1.DispatchPolicyRule{{Verbs: []string{"list"}, APIGroups: []string{""}, Resources: []string{"pods"}}},
					Strategy:              gatewayv1alpha1.RoundRobin,
					FlowControlSchemaName: "free",
				}}
			},
		},
		{
			name: "errors of several fields are all reported, in order",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.Servers[0].Endpoint = "http://x"
				uc.Spec.ClientConfig.SecretRef.Namespace = "default"
				uc.Spec.HealthCheck.Path = "x"
				uc.Spec.Impersonation = &gatewayv1alpha1.ImpersonationPolicy{UserPrefix: "system:"}
				uc.Spec.FlowControl = &gatewayv1alpha1.FlowControl{FlowControlSchemas: []gatewayv1alpha1.FlowControlSchema{{Name: "x"}}}
				uc.Spec.DispatchPolicies = []gatewayv1alpha1.DispatchPolicy{{}}
			},
			want: []fieldErr{
				{field.ErrorTypeInvalid, "spec.servers[0].endpoint"},
				{field.ErrorTypeNotSupported, "spec.clientConfig.secretRef.namespace"},
				{field.ErrorTypeInvalid, "spec.healthCheck.path"},
				{field.ErrorTypeInvalid, "spec.impersonation.userPrefix"},
				{field.ErrorTypeRequired, "spec.flowControl.flowControlSchemas[0]"},
				{field.ErrorTypeRequired, "spec.dispatchPolicies[0].name"},
				{field.ErrorTypeRequired, "spec.dispatchPolicies[0].rules"},
				{field.ErrorTypeNotSupported, "spec.dispatchPolicies[0].strategy"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			uc := valid()
			tt.mutate(uc)
			o := opts
			if tt.opts != nil {
				o = *tt.opts
			}
			assertErrors(t, validation.ValidateUpstreamCluster(uc, o), tt.want)

			// An update validates the spec the same way.
			old := valid()
			old.Name = uc.Name
			old.Namespace = uc.Namespace
			if tt.want == nil || !strings.HasPrefix(tt.want[0].Field, "metadata") {
				assertErrors(t, validation.ValidateUpstreamClusterUpdate(uc, old, o), tt.want)
			}
		})
	}
}

func TestValidateUpstreamClusterDetails(t *testing.T) {
	t.Run("caData value is not echoed", func(t *testing.T) {
		uc := valid()
		uc.Spec.ClientConfig.CAData = []byte("-----BEGIN CERTIFICATE-----\nsecretish\n-----END CERTIFICATE-----\n")
		errs := validation.ValidateUpstreamCluster(uc, opts)
		if len(errs) != 1 {
			t.Fatalf("got %v, want one error", errs)
		}
		if strings.Contains(errs.ToAggregate().Error(), "secretish") {
			t.Errorf("error repeats caData: %v", errs)
		}
	})
	t.Run("NotSupported lists the secret namespace", func(t *testing.T) {
		uc := valid()
		uc.Spec.ClientConfig.SecretRef.Namespace = "default"
		errs := validation.ValidateUpstreamCluster(uc, opts)
		if len(errs) != 1 || errs[0].Type != field.ErrorTypeNotSupported {
			t.Fatalf("got %v, want one NotSupported error", errs)
		}
		if !strings.Contains(errs[0].Error(), `"`+secretNamespace+`"`) {
			t.Errorf("error %q does not name the supported namespace %q", errs[0].Error(), secretNamespace)
		}
		if errs[0].BadValue != "default" {
			t.Errorf("BadValue = %v, want default", errs[0].BadValue)
		}
	})
	t.Run("Duplicate carries the endpoint", func(t *testing.T) {
		uc := valid()
		uc.Spec.Servers[1].Endpoint = uc.Spec.Servers[0].Endpoint
		errs := validation.ValidateUpstreamCluster(uc, opts)
		if len(errs) != 1 || errs[0].BadValue != "https://192.0.2.10:6443" {
			t.Fatalf("got %#v, want one Duplicate of https://192.0.2.10:6443", errs)
		}
	})
}

func TestValidateUpstreamClusterUpdateMetadata(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(uc *gatewayv1alpha1.UpstreamCluster)
		want   []fieldErr
	}{
		{name: "spec change", mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.Servers[1].Disabled = false }},
		{name: "labels change", mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Labels = map[string]string{"a": "b"} }},
		{
			name:   "name is immutable",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Name = "member-b" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "metadata.name"}},
		},
		{
			name:   "invalid spec",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Spec.Servers = nil },
			want:   []fieldErr{{field.ErrorTypeRequired, "spec.servers"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := valid()
			uc := old.DeepCopy()
			tt.mutate(uc)
			assertErrors(t, validation.ValidateUpstreamClusterUpdate(uc, old, opts), tt.want)
		})
	}
}

func TestValidateUpstreamClusterStatusUpdate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(uc *gatewayv1alpha1.UpstreamCluster)
		want   []fieldErr
	}{
		{
			name: "valid status",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Status = gatewayv1alpha1.UpstreamClusterStatus{
					ObservedGeneration: 3,
					Servers: []gatewayv1alpha1.ServerStatus{
						{Endpoint: "https://192.0.2.10:6443", Healthy: ptr.To(true)},
						{Endpoint: "https://192.0.2.11:6443"},
					},
				}
			},
		},
		{
			name: "the spec is not validated by a status update",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Spec.Servers = nil
				uc.Spec.ClientConfig = gatewayv1alpha1.ClientConfig{}
			},
		},
		{
			name:   "negative observedGeneration",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Status.ObservedGeneration = -1 },
			want:   []fieldErr{{field.ErrorTypeInvalid, "status.observedGeneration"}},
		},
		{
			name: "duplicate server status",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Status.Servers = []gatewayv1alpha1.ServerStatus{
					{Endpoint: "https://192.0.2.10:6443"},
					{Endpoint: "https://192.0.2.11:6443"},
					{Endpoint: "https://192.0.2.10:6443", Healthy: ptr.To(true)},
				}
			},
			want: []fieldErr{{field.ErrorTypeDuplicate, "status.servers[2].endpoint"}},
		},
		{
			name: "caches",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				now := metav1.Now()
				uc.Status.Caches = []gatewayv1alpha1.UpstreamClusterCacheStatus{
					{CachedResource: "configmaps", Version: "v1", Resource: "configmaps", Synced: true, ResourceVersion: "1234",
						Objects: 12, Bytes: 40960, LastSyncTime: &now},
					{CachedResource: "deployments", Group: "apps", Version: "v1", Resource: "deployments",
						StaleSince: &now, Reason: "Forbidden", Message: "the cache identity may not list deployments"},
				}
			},
		},
		{
			name: "caches: a name missing, a duplicate, negative counts",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) {
				uc.Status.Caches = []gatewayv1alpha1.UpstreamClusterCacheStatus{
					{CachedResource: "configmaps", Version: "v1", Resource: "configmaps"},
					{Version: "v1", Resource: "pods"},
					{CachedResource: "configmaps", Version: "v1", Resource: "configmaps", Objects: -1, Bytes: -1},
				}
			},
			want: []fieldErr{
				{field.ErrorTypeRequired, "status.caches[1].cachedResource"},
				{field.ErrorTypeDuplicate, "status.caches[2].cachedResource"},
				{field.ErrorTypeInvalid, "status.caches[2].objects"},
				{field.ErrorTypeInvalid, "status.caches[2].bytes"},
			},
		},
		{
			name:   "name is immutable",
			mutate: func(uc *gatewayv1alpha1.UpstreamCluster) { uc.Name = "member-b" },
			want:   []fieldErr{{field.ErrorTypeInvalid, "metadata.name"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old := valid()
			uc := old.DeepCopy()
			tt.mutate(uc)
			assertErrors(t, validation.ValidateUpstreamClusterStatusUpdate(uc, old), tt.want)
		})
	}
}

// The same server written differently is still a duplicate.
func TestDuplicateEndpointsAreComparedCanonically(t *testing.T) {
	for _, pair := range [][2]string{
		{"https://a.example.com", "https://a.example.com:443"},
		{"https://A.example.com:6443", "https://a.example.com:6443"},
		{"https://[2001:db8::1]:443", "https://[2001:db8::1]"},
	} {
		uc := valid()
		uc.Spec.Servers = []gatewayv1alpha1.UpstreamServer{{Endpoint: pair[0]}, {Endpoint: pair[1]}}
		errs := validation.ValidateUpstreamCluster(uc, validation.Options{SecretNamespace: uc.Spec.ClientConfig.SecretRef.Namespace})
		if len(errs) != 1 || errs[0].Type != field.ErrorTypeDuplicate || errs[0].Field != "spec.servers[1].endpoint" {
			t.Errorf("%v: errors %v, want one Duplicate at spec.servers[1].endpoint", pair, errs)
		}
	}
	uc := valid()
	uc.Spec.Servers = []gatewayv1alpha1.UpstreamServer{{Endpoint: "https://a.example.com:6443"}, {Endpoint: "https://a.example.com:6444"}}
	if errs := validation.ValidateUpstreamCluster(uc, validation.Options{SecretNamespace: uc.Spec.ClientConfig.SecretRef.Namespace}); len(errs) != 0 {
		t.Errorf("different ports reported: %v", errs)
	}
}
