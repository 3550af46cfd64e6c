package harness

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certAuthority is a self-signed CA held in memory and written to dir/<name>.crt|key.
type certAuthority struct {
	cert    *x509.Certificate
	key     crypto.Signer
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
	DNSNames     []string
	IPs          []net.IP
	Server       bool // ExtKeyUsageServerAuth
	Client       bool // ExtKeyUsageClientAuth
}

const certLifetime = 365 * 24 * time.Hour

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
}

func newECKey() (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func writeFile(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, mode)
}

// newCA creates a CA named name and writes dir/name.crt and dir/name.key.
func newCA(dir, name string) (*certAuthority, error) {
	key, keyPEM, err := newECKey()
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &certAuthority{
		cert:     cert,
		key:      key,
		CertPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		CertFile: filepath.Join(dir, name+".crt"),
		KeyFile:  filepath.Join(dir, name+".key"),
	}
	if err := writeFile(ca.CertFile, ca.CertPEM, 0o644); err != nil {
		return nil, err
	}
	if err := writeFile(ca.KeyFile, keyPEM, 0o600); err != nil {
		return nil, err
	}
	return ca, nil
}

// issue signs a leaf certificate and writes dir/name.crt and dir/name.key.
func (ca *certAuthority) issue(dir, name string, spec certSpec) (*keyPair, error) {
	key, keyPEM, err := newECKey()
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: spec.CommonName, Organization: spec.Organization},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		DNSNames:     spec.DNSNames,
		IPAddresses:  spec.IPs,
	}
	if spec.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if spec.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, err
	}
	kp := &keyPair{
		CertFile: filepath.Join(dir, name+".crt"),
		KeyFile:  filepath.Join(dir, name+".key"),
		CertPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:   keyPEM,
	}
	if err := writeFile(kp.CertFile, kp.CertPEM, 0o644); err != nil {
		return nil, err
	}
	if err := writeFile(kp.KeyFile, kp.KeyPEM, 0o600); err != nil {
		return nil, err
	}
	return kp, nil
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
		DNSNames:   append([]string{"localhost"}, extraDNS...),
		IPs:        []net.IP{net.ParseIP("127.0.0.1")},
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
	kp, err := c.ca.issue(dir, name, certSpec{CommonName: commonName, Client: true})
	if err != nil {
		return "", "", err
	}
	return kp.CertFile, kp.KeyFile, nil
}
