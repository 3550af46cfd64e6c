package harness

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kubewharf/kube-gateway/test/testca"
)

// certAuthority is a self-signed CA held in memory and written to dir/<name>.crt|key.
type certAuthority struct {
	ca      *testca.CA
	CertPEM []byte
	// CertFile and KeyFile are the written PEM files.
	CertFile, KeyFile string
}

// keyPair is a leaf certificate and key written to disk.
type keyPair struct {
	CertFile, KeyFile string
	CertPEM, KeyPEM   []byte
}

type certSpec struct {
	CommonName   string
	Organization []string
	// SANs are IP addresses or DNS names.
	SANs   []string
	Server bool // ExtKeyUsageServerAuth, else ExtKeyUsageClientAuth
}

// certLifetime: a detached environment (local-up) may run for long.
const certLifetime = 365 * 24 * time.Hour

func writeFile(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, mode)
}

// newCA creates a CA named name and writes dir/name.crt and dir/name.key.
// Its serial numbers are random: tests tell the gateway's serving
// certificate from its replacement by the serial.
func newCA(dir, name string) (*certAuthority, error) {
	ca, err := testca.NewCA(name, testca.Options{ValidFor: certLifetime, RandomSerials: true})
	if err != nil {
		return nil, err
	}
	certFile, keyFile, err := testca.WriteFiles(dir, name, ca.PEM, ca.KeyPEM)
	if err != nil {
		return nil, err
	}
	return &certAuthority{ca: ca, CertPEM: ca.PEM, CertFile: certFile, KeyFile: keyFile}, nil
}

// issue signs a leaf certificate and writes dir/name.crt and dir/name.key.
func (ca *certAuthority) issue(dir, name string, spec certSpec) (*keyPair, error) {
	usage := x509.ExtKeyUsageClientAuth
	if spec.Server {
		usage = x509.ExtKeyUsageServerAuth
	}
	leaf, err := ca.ca.Sign(testca.Spec{CommonName: spec.CommonName, Organization: spec.Organization, Usage: usage,
		SANs: spec.SANs, NotAfter: time.Now().Add(certLifetime)})
	if err != nil {
		return nil, err
	}
	certFile, keyFile, err := testca.WriteFiles(dir, name, leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		return nil, err
	}
	return &keyPair{CertFile: certFile, KeyFile: keyFile, CertPEM: leaf.CertPEM, KeyPEM: leaf.KeyPEM}, nil
}

// serviceAccountKey writes an RSA key (PKCS#1 PEM) used both as
// --service-account-key-file and --service-account-signing-key-file.
func serviceAccountKey(path string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	return writeFile(path, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600)
}

func loopbackServing(extraDNS ...string) certSpec {
	return certSpec{
		CommonName: "127.0.0.1",
		SANs:       append([]string{"127.0.0.1", "localhost"}, extraDNS...),
		Server:     true,
	}
}

func randomToken() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return hex.EncodeToString(b)
}

// CA is a certificate authority a test can issue certificates from, for
// example to rotate the gateway's serving certificate or request-header CA.
type CA struct {
	ca *certAuthority
}

// NewCA creates a CA and writes dir/name.crt and dir/name.key.
func NewCA(dir, name string) (*CA, error) {
	ca, err := newCA(dir, name)
	if err != nil {
		return nil, err
	}
	return &CA{ca: ca}, nil
}

// CertFile is the CA certificate (PEM).
func (c *CA) CertFile() string { return c.ca.CertFile }

// CertPEM is the CA certificate.
func (c *CA) CertPEM() []byte { return c.ca.CertPEM }

// IssueGatewayServing issues a serving certificate for the gateway on
// loopback (127.0.0.1, localhost and its Service name) into dir/name.crt|key.
func (c *CA) IssueGatewayServing(dir, name string) (certFile, keyFile string, err error) {
	kp, err := c.ca.issue(dir, name, loopbackServing(GatewayService+"."+GatewayNamespace+".svc"))
	if err != nil {
		return "", "", err
	}
	return kp.CertFile, kp.KeyFile, nil
}

// IssueClient issues a client certificate for commonName into dir/name.crt|key.
func (c *CA) IssueClient(dir, name, commonName string) (certFile, keyFile string, err error) {
	kp, err := c.ca.issue(dir, name, certSpec{CommonName: commonName})
	if err != nil {
		return "", "", err
	}
	return kp.CertFile, kp.KeyFile, nil
}
