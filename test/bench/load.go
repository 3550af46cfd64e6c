package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// target is one way to reach member-b's apiserver: a base URL, a shared,
// reused HTTP client (keep-alive, HTTP/2 when offered) and the headers that
// authenticate the caller.
type target struct {
	Key    string // direct | gateway | hub
	Label  string
	Base   string // the member path is appended to it
	Client *http.Client
	Header http.Header
	Proto  string // negotiated protocol, seen on the first response
}

// newClient returns a client that keeps connections alive and speaks HTTP/2
// whenever the server offers it over ALPN. Compression stays on (Go's
// default, as client-go's): a large LIST may arrive gzip-encoded.
func newClient(caPEM []byte, cert *tls.Certificate) (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in CA bundle")
	}
	tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	tr := &http.Transport{
		TLSClientConfig:     tc,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     5 * time.Minute,
	}
	return &http.Client{Transport: tr, Timeout: 2 * time.Minute}, nil
}

// result of one request.
type result struct {
	Status       int
	Bytes        int64
	Uncompressed bool // the body came gzip-encoded and Go decoded it
	Proto        string
	FirstByte    time.Duration // time to the first response byte
	Encoding     string        // Content-Encoding left on the response (identity requests)
}

// do sends GET base+path and reads the whole body.
func (t *target) do(ctx context.Context, path string) (result, error) {
	return t.doEnc(ctx, path, false, false)
}

// doEnc is do; identity asks for an uncompressed body (Accept-Encoding:
// identity) instead of Go's default gzip; trace records the time to the first
// response byte.
func (t *target) doEnc(ctx context.Context, path string, identity, trace bool) (result, error) {
	start := time.Now()
	var firstByte time.Duration
	if trace {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotFirstResponseByte: func() { firstByte = time.Since(start) }})
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.Base+path, nil)
	if err != nil {
		return result{}, err
	}
	for k, v := range t.Header {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "application/json")
	if identity {
		req.Header.Set("Accept-Encoding", "identity")
	}
	resp, err := t.Client.Do(req)
	if err != nil {
		return result{}, err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	r := result{Status: resp.StatusCode, Bytes: n, Uncompressed: resp.Uncompressed, Proto: resp.Proto, FirstByte: firstByte,
		Encoding: resp.Header.Get("Content-Encoding")}
	if err != nil {
		return r, err
	}
	if resp.StatusCode != http.StatusOK {
		return r, fmt.Errorf("GET %s: %s", t.Base+path, resp.Status)
	}
	return r, nil
}

// run is one load run against one target.
type run struct {
	Requests  int
	Errors    int
	FirstErr  error
	Elapsed   time.Duration
	Latencies []time.Duration // sorted
}

func (r run) RPS() float64 { return float64(r.Requests) / r.Elapsed.Seconds() }

// Pct returns the p-th percentile (nearest rank) of the latencies.
func (r run) Pct(p float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	i := int(float64(len(r.Latencies))*p/100+0.5) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(r.Latencies) {
		i = len(r.Latencies) - 1
	}
	return r.Latencies[i]
}

// load sends GETs of path with c workers until n requests were sent (n > 0)
// or d passed (n == 0). Every request is timed; throughput is completed
// requests over the wall time from the start until the last one finished.
func (t *target) load(ctx context.Context, path string, c, n int, d time.Duration) run {
	var (
		wg       sync.WaitGroup
		sent     atomic.Int64
		mu       sync.Mutex
		all      []time.Duration
		errs     int
		firstErr error
	)
	deadline := time.Now().Add(d)
	start := time.Now()
	for w := 0; w < c; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 4096)
			var nerr int
			var ferr error
			for ctx.Err() == nil {
				if n > 0 {
					if sent.Add(1) > int64(n) {
						break
					}
				} else if !time.Now().Before(deadline) {
					break
				}
				t0 := time.Now()
				res, err := t.do(ctx, path)
				el := time.Since(t0)
				if err != nil {
					nerr++
					if ferr == nil {
						ferr = err
					}
					continue
				}
				if t.Proto == "" {
					mu.Lock()
					t.Proto = res.Proto
					mu.Unlock()
				}
				lat = append(lat, el)
			}
			mu.Lock()
			all = append(all, lat...)
			errs += nerr
			if firstErr == nil {
				firstErr = ferr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	return run{Requests: len(all), Errors: errs, FirstErr: firstErr, Elapsed: elapsed, Latencies: all}
}
