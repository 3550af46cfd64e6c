// Package certcache remembers which client certificate chains verified, by
// the connection's parsed leaf certificate: the TLS stack parses a
// connection's certificates once, at its handshake, and every request of
// that connection carries the same *x509.Certificate, so a connection's first
// request verifies its chain (a public-key signature check per certificate)
// and the others cost a lock-free lookup (BenchmarkTrusted in proxy/frontproxy;
// docs/benchmark-history.md).
package certcache

import (
	"crypto/x509"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// Cache remembers successful verifications. Safe for concurrent use.
type Cache struct {
	clock    clock.PassiveClock
	max      int32
	verified sync.Map // *x509.Certificate (a connection's leaf) -> verification
	size     atomic.Int32
}

// verification is a successful chain verification of a certificate.
type verification struct {
	// roots is the CA pool the chain was verified against: a new bundle is
	// a new pool, so another pointer means another bundle.
	roots               *x509.CertPool
	intermediates       *x509.CertPool // from the caller's options, usually nil
	notBefore, notAfter time.Time      // of the whole verified chain
}

// New returns a cache of at most max certificates (about one per live
// connection; it starts over when full, so a new connection verifies once).
func New(max int, clk clock.PassiveClock) *Cache {
	return &Cache{clock: clk, max: int32(max)}
}

// Verify tells whether the chain certs (leaf first, then intermediates the
// client sent) verifies under opts, from the cache when the same leaf
// verified under the same roots and intermediates and the chain is still
// within its validity window.
func (c *Cache) Verify(certs []*x509.Certificate, opts x509.VerifyOptions) error {
	leaf := certs[0]
	now := c.clock.Now()
	if cached, ok := c.verified.Load(leaf); ok {
		v := cached.(verification)
		if v.roots == opts.Roots && v.intermediates == opts.Intermediates && !now.Before(v.notBefore) && !now.After(v.notAfter) {
			return nil
		}
	}
	configured := opts.Intermediates
	if opts.Intermediates == nil && len(certs) > 1 {
		opts.Intermediates = x509.NewCertPool()
		for _, intermediate := range certs[1:] {
			opts.Intermediates.AddCert(intermediate)
		}
	}
	opts.CurrentTime = now
	chains, err := leaf.Verify(opts)
	if err != nil {
		return err
	}
	v := verification{roots: opts.Roots, intermediates: configured, notBefore: leaf.NotBefore, notAfter: leaf.NotAfter}
	for _, cert := range chains[0] {
		if cert.NotBefore.After(v.notBefore) {
			v.notBefore = cert.NotBefore
		}
		if cert.NotAfter.Before(v.notAfter) {
			v.notAfter = cert.NotAfter
		}
	}
	c.remember(leaf, v)
	return nil
}

// remember records that leaf verified as v, starting over when the cache is
// full. The bound is approximate under concurrency, which is all it needs to
// be: it keeps the cache from holding every certificate of connections long
// gone.
func (c *Cache) remember(leaf *x509.Certificate, v verification) {
	if _, replaced := c.verified.Swap(leaf, v); replaced {
		return
	}
	if c.size.Add(1) > c.max {
		c.verified.Clear()
		c.size.Store(1)
		c.verified.Store(leaf, v)
	}
}

// Remembered tells whether leaf's verification is remembered.
func (c *Cache) Remembered(leaf *x509.Certificate) bool {
	_, ok := c.verified.Load(leaf)
	return ok
}

// Len is the number of remembered certificates.
func (c *Cache) Len() int {
	n := 0
	c.verified.Range(func(any, any) bool { n++; return true })
	return n
}
