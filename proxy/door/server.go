package door

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// nextProtos: HTTP/2 for everything but upgrades, which clients ask for over
// HTTP/1.1.
var nextProtos = []string{"h2", "http/1.1"}

// Doors finds the door that serves a server name; the cluster set is one.
type Doors interface {
	// Door returns the door serving name (lower case), or an error that says
	// why none does.
	Door(name string) (*Door, error)
}

// ServeFunc forwards req, authenticated as the member identity in its
// context, to the member cluster (handler.Handler.ServeDoor).
type ServeFunc func(w http.ResponseWriter, req *http.Request, cluster string)

// Server is the member door.
type Server struct {
	doors      Doors
	serve      ServeFunc
	serializer runtime.NegotiatedSerializer
}

// NewServer returns the member door over doors, forwarding with serve;
// serializer encodes errors as Status objects.
func NewServer(doors Doors, serve ServeFunc, serializer runtime.NegotiatedSerializer) *Server {
	return &Server{doors: doors, serve: serve, serializer: serializer}
}

// TLSConfig is the listener's TLS configuration: the server name a client
// sends picks the door, whose certificate answers.
func (s *Server) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: nextProtos,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			if hello.ServerName == "" {
				return nil, errors.New("member door: the client sent no server name (SNI); connect by one of an UpstreamCluster's spec.secureServing.serverNames")
			}
			d, err := s.doors.Door(strings.ToLower(hello.ServerName))
			if err != nil {
				return nil, fmt.Errorf("member door: server name %q: %w", hello.ServerName, err)
			}
			return d.tls, nil
		},
	}
}

// Authenticate is the door's first handler: it finds the door of the
// connection's server name, checks that the request names no other host and
// authenticates the client against that member; next serves what passes,
// with the member identity in the request's context
// (genericapirequest.UserFrom) and the door in it for ClusterFrom and the
// impersonation filter; refused serves what does not, with the error in the
// context for Refusal.
func (s *Server) Authenticate(next, refused http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		d, u, err := s.authenticate(req)
		if err != nil {
			refused.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), refusalKey{}, err)))
			return
		}
		ctx := genericapirequest.WithUser(req.Context(), u)
		next.ServeHTTP(w, req.WithContext(context.WithValue(ctx, doorKey{}, d)))
	})
}

type refusalKey struct{}

// Refusal writes the error Authenticate refused a request with, as a Status
// (the refused handler of Authenticate, which may wrap it, e.g. to audit).
func (s *Server) Refusal() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		err, ok := req.Context().Value(refusalKey{}).(error)
		if !ok {
			err = apierrors.NewUnauthorized("Unauthorized")
		}
		responsewriters.ErrorNegotiated(err, s.serializer, gatewayv1alpha1.SchemeGroupVersion, w, req)
	})
}

// Serve forwards an authenticated request to its door's cluster.
func (s *Server) Serve(w http.ResponseWriter, req *http.Request) {
	s.serve(w, req, ClusterFrom(req.Context()))
}

type doorKey struct{}

// ClusterFrom returns the cluster whose door a request came in by.
func ClusterFrom(ctx context.Context) string {
	if d, ok := ctx.Value(doorKey{}).(*Door); ok {
		return d.Cluster
	}
	return ""
}

// authorizeImpersonation decides a client's own impersonation by its door's
// member (authorizer.UnconditionalAuthorizer for the impersonation filter).
type authorizeImpersonation struct{}

func (authorizeImpersonation) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	d, ok := ctx.Value(doorKey{}).(*Door)
	if !ok || d.impersonation == nil {
		return authorizer.DecisionNoOpinion, "not a member door request", nil
	}
	return d.impersonation.Authorize(ctx, a)
}

func (s *Server) authenticate(req *http.Request) (*Door, user.Info, error) {
	if req.TLS == nil || req.TLS.ServerName == "" {
		return nil, nil, apierrors.NewBadRequest("the member door is served over TLS with a server name (SNI) only")
	}
	sni := strings.ToLower(req.TLS.ServerName)
	d, err := s.doors.Door(sni)
	if err != nil {
		// The door went away, or changed names, since the handshake.
		return nil, nil, apierrors.NewServiceUnavailable(fmt.Sprintf("server name %q: %v", sni, err))
	}
	if host := hostOf(req.Host); host != sni && net.ParseIP(host) == nil {
		// HTTP/2 lets a client reuse a connection for another name its
		// certificate covers: that name may be another cluster's.
		return nil, nil, misdirected(fmt.Sprintf("this connection serves %q (its TLS server name), not %q: connect again with server name %q", sni, host, host))
	}
	if len(req.TLS.PeerCertificates) == 0 {
		token, ok := bearerToken(req)
		if !ok {
			return nil, nil, apierrors.NewUnauthorized(fmt.Sprintf("upstream cluster %q: the member door needs a client certificate of the member's CA, or a bearer token the member accepts", d.Cluster))
		}
		if d.tokens == nil {
			return nil, nil, apierrors.NewUnauthorized(fmt.Sprintf("upstream cluster %q: the member door takes no bearer tokens (spec.secureServing.tokenReview.disabled): use a client certificate of the member's CA", d.Cluster))
		}
		resp, ok, err := d.tokens.AuthenticateToken(req.Context(), token)
		switch {
		case err != nil:
			// Never 401: a client would drop a token that is good.
			return nil, nil, apierrors.NewServiceUnavailable(fmt.Sprintf("upstream cluster %q: the member could not review the bearer token: %v", d.Cluster, err))
		case !ok:
			return nil, nil, apierrors.NewUnauthorized(fmt.Sprintf("upstream cluster %q: the member does not accept the bearer token", d.Cluster))
		}
		req.Header.Del("Authorization") // the gateway's own credential replaces it
		return d, resp.User, nil
	}
	if d.clientCAs.Load() == nil {
		return nil, nil, apierrors.NewServiceUnavailable(fmt.Sprintf("upstream cluster %q: the member's client CA is not read yet: %v", d.Cluster, d.memberCA.lastError()))
	}
	u, err := d.verify(req.TLS.PeerCertificates)
	if err != nil {
		klog.FromContext(req.Context()).V(2).Info("Member door refused a client certificate", "upstreamcluster", d.Cluster, "err", err.Error())
		return nil, nil, apierrors.NewUnauthorized(fmt.Sprintf("upstream cluster %q: client certificate: %v", d.Cluster, err))
	}
	return d, u, nil
}

// verify checks a client certificate chain against the door's client CAs and
// maps it as kube-apiserver does: the common name is the user, the
// organizations its groups.
func (d *Door) verify(chain []*x509.Certificate) (user.Info, error) {
	if err := d.verified.Verify(chain, x509.VerifyOptions{Roots: d.clientCAs.Load(), KeyUsages: clientAuth}); err != nil {
		return nil, err
	}
	leaf := chain[0]
	if leaf.Subject.CommonName == "" {
		return nil, errors.New("the certificate has no common name, which names the user")
	}
	groups := append([]string{}, leaf.Subject.Organization...)
	return &user.DefaultInfo{Name: leaf.Subject.CommonName, Groups: append(groups, user.AllAuthenticated)}, nil
}

var clientAuth = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}

// hostOf is a Host header's host, lower case, without port or brackets.
func hostOf(hostport string) string {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	return strings.ToLower(strings.Trim(host, "[]"))
}

// misdirected is 421 Misdirected Request: the client should retry on a
// connection of its own for that name.
func misdirected(msg string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusMisdirectedRequest, Reason: "MisdirectedRequest", Message: msg}}
}

// bearerToken is the token of an "Authorization: Bearer" header.
func bearerToken(req *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(req.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	return token, ok && strings.EqualFold(scheme, "bearer") && token != ""
}
