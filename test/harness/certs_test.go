package harness

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"
)

// The environment's certificates load from their files, verify for their use
// (serving on loopback, client), last as long as a detached environment may
// run, and have serials that differ across CAs: the e2e rotation test tells
// the gateway's serving certificate from its replacement by the serial.
func TestIssuedCertificates(t *testing.T) {
	dir := t.TempDir()
	var serials []string
	for _, name := range []string{"one", "two"} {
		ca, err := newCA(dir, name+"-ca")
		if err != nil {
			t.Fatal(err)
		}
		serving, err := ca.issue(dir, name+"-serving", loopbackServing("gateway.example.svc"))
		if err != nil {
			t.Fatal(err)
		}
		client, err := ca.issue(dir, name+"-client", certSpec{CommonName: "alice", Organization: []string{"dev"}})
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(ca.CertPEM)
		for _, c := range []struct {
			kp    *keyPair
			host  string
			usage x509.ExtKeyUsage
		}{
			{serving, "127.0.0.1", x509.ExtKeyUsageServerAuth},
			{serving, "localhost", x509.ExtKeyUsageServerAuth},
			{serving, "gateway.example.svc", x509.ExtKeyUsageServerAuth},
			{client, "", x509.ExtKeyUsageClientAuth},
		} {
			pair, err := tls.LoadX509KeyPair(c.kp.CertFile, c.kp.KeyFile)
			if err != nil {
				t.Fatal(err)
			}
			leaf, err := x509.ParseCertificate(pair.Certificate[0])
			if err != nil {
				t.Fatal(err)
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: c.host, KeyUsages: []x509.ExtKeyUsage{c.usage}}); err != nil {
				t.Errorf("%s for %q: %v", c.kp.CertFile, c.host, err)
			}
			if left := time.Until(leaf.NotAfter); left < certLifetime-time.Hour {
				t.Errorf("%s expires in %v, want %v", c.kp.CertFile, left, certLifetime)
			}
			if c.usage == x509.ExtKeyUsageClientAuth && (leaf.Subject.CommonName != "alice" || len(leaf.Subject.Organization) != 1 || leaf.Subject.Organization[0] != "dev") {
				t.Errorf("client certificate subject %v, want CN alice, O dev", leaf.Subject)
			}
		}
		serials = append(serials, serving.cert(t).SerialNumber.String())
	}
	if serials[0] == serials[1] {
		t.Errorf("the serving certificates of two CAs have the same serial %s", serials[0])
	}
}

func (kp *keyPair) cert(t *testing.T) *x509.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return c
}
