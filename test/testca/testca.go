// Package testca issues certificates for tests: a CA, and the serving and
// client certificates it signs. Keys are ECDSA P-256; certificates are valid
// from an hour ago for an hour unless a Spec says otherwise, the CA for a day
// unless Options say otherwise.
//
// New and Issue are for tests; NewCA, Sign and WriteFiles return errors, for
// the test environment (test/harness), which also runs outside tests.
package testca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a test certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// PEM is the CA certificate, PEM-encoded: what a client trusts.
	PEM []byte
	// KeyPEM is Key, PEM-encoded.
	KeyPEM []byte

	serial        atomic.Int64
	randomSerials bool
}

// Options of NewCA.
type Options struct {
	// ValidFor is how long the CA is valid from now; 0 means a day.
	ValidFor time.Duration
	// RandomSerials gives the CA and the certificates it issues random
	// 126-bit serial numbers, unique across CAs, rather than 1, 2, 3, ...:
	// for an environment whose tests tell a certificate from its replacement,
	// issued by another CA, by the serial.
	RandomSerials bool
}

// New returns a new CA named cn.
func New(t testing.TB, cn string) *CA {
	t.Helper()
	c, err := NewCA(cn, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// NewCA is New for callers without a testing.TB.
func NewCA(cn string, o Options) (*CA, error) {
	if o.ValidFor == 0 {
		o.ValidFor = 24 * time.Hour
	}
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, err
	}
	c := &CA{Key: key, KeyPEM: keyPEM, randomSerials: o.RandomSerials}
	sn := big.NewInt(1)
	if o.RandomSerials {
		if sn, err = randomSerial(); err != nil {
			return nil, err
		}
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(o.ValidFor),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	if c.Cert, err = x509.ParseCertificate(der); err != nil {
		return nil, err
	}
	c.PEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	c.serial.Store(1)
	return c, nil
}

// Spec describes a certificate to issue.
type Spec struct {
	CommonName   string
	Organization []string
	// Usage is x509.ExtKeyUsageServerAuth or x509.ExtKeyUsageClientAuth.
	Usage x509.ExtKeyUsage
	// SANs are IP addresses or DNS names.
	SANs []string
	// Serial, if not 0, is the serial number; otherwise the CA's next one
	// (a random one with Options.RandomSerials).
	Serial int64
	// NotAfter, if set, ends the validity; otherwise an hour from now.
	NotAfter time.Time
}

// Leaf is an issued certificate and its key.
type Leaf struct {
	Cert            *x509.Certificate
	CertPEM, KeyPEM []byte
}

// TLS returns the certificate and key for a tls.Config.
func (l Leaf) TLS(t testing.TB) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(l.CertPEM, l.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Issue signs a certificate for s.
func (c *CA) Issue(t testing.TB, s Spec) Leaf {
	t.Helper()
	l, err := c.Sign(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Sign is Issue for callers without a testing.TB.
func (c *CA) Sign(s Spec) (Leaf, error) {
	key, keyPEM, err := newKey()
	if err != nil {
		return Leaf{}, err
	}
	serial := big.NewInt(s.Serial)
	switch {
	case s.Serial != 0:
	case c.randomSerials:
		if serial, err = randomSerial(); err != nil {
			return Leaf{}, err
		}
	default:
		serial = big.NewInt(c.serial.Add(1))
	}
	notAfter := s.NotAfter
	if notAfter.IsZero() {
		notAfter = time.Now().Add(time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: s.CommonName, Organization: s.Organization},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{s.Usage},
	}
	for _, san := range s.SANs {
		if ip := net.ParseIP(san); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, san)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.Cert, &key.PublicKey, c.Key)
	if err != nil {
		return Leaf{}, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return Leaf{}, err
	}
	return Leaf{
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  keyPEM,
	}, nil
}

// WriteFiles writes certPEM to dir/name.crt (mode 0644) and keyPEM to
// dir/name.key (0600), creating dir if missing, and returns their paths.
func WriteFiles(dir, name string, certPEM, keyPEM []byte) (certFile, keyFile string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// newKey returns a P-256 key and its PEM (SEC 1, "EC PRIVATE KEY").
func newKey() (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func randomSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
}
