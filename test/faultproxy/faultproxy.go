// Package faultproxy is a TCP relay for tests that stands in front of a server
// and misbehaves on demand: it adds latency to what the server sends, resets
// connections in the middle of a response, or answers with bytes that are not
// TLS. It works on raw TCP, so TLS passes through it untouched: the server's
// certificate must be valid for 127.0.0.1, where the relay listens.
//
// The mode can be switched at any time. Latency and resets apply to the data the
// server sends from then on, on live connections too; Garbage applies to
// connections accepted from then on.
package faultproxy

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is how the relay treats connections.
type Mode struct {
	// Latency delays every byte from the server by this long: each response
	// arrives Latency later, as over a slow link.
	Latency time.Duration
	// ResetAfter, when positive, resets the client's connection (RST, not FIN)
	// once the server sent more than this many bytes on it, counted from the
	// connection's start (the TLS handshake included). The byte that crosses
	// the limit is not forwarded.
	ResetAfter int64
	// Garbage answers new connections with bytes that are not TLS, then closes
	// them, without connecting to the server.
	Garbage bool
}

// PassThrough forwards everything unchanged.
var PassThrough = Mode{}

// GarbageBytes is what Garbage mode answers: the start of an HTTP response,
// which a TLS client reports as "first record does not look like a TLS handshake".
var GarbageBytes = []byte("HTTP/1.0 418 not TLS\r\n\r\n")

// Proxy relays connections from its listener to a target address.
type Proxy struct {
	target   string
	listener net.Listener
	mode     atomic.Pointer[Mode]

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// Start listens on 127.0.0.1 on a free port and relays to target (host:port)
// in PassThrough mode.
func Start(target string) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, listener: l, conns: map[net.Conn]struct{}{}}
	p.mode.Store(&PassThrough)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address the proxy listens on, host:port.
func (p *Proxy) Addr() string { return p.listener.Addr().String() }

// URL is https://Addr.
func (p *Proxy) URL() string { return "https://" + p.Addr() }

// Set switches the mode.
func (p *Proxy) Set(m Mode) { p.mode.Store(&m) }

// Close stops listening and closes every connection.
func (p *Proxy) Close() error {
	err := p.listener.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(client) {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(client)
			p.serve(client)
		}()
	}
}

func (p *Proxy) serve(client net.Conn) {
	if p.mode.Load().Garbage {
		_ = client.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = client.Write(GarbageBytes)
		closeWrite(client)
		// Read until the client closes: closing with its bytes unread would
		// send RST, and the client would see a reset instead of the garbage.
		_, _ = io.Copy(io.Discard, client)
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 10*time.Second)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(server, client)
		closeWrite(server)
	}()
	if reset := p.relay(client, server); reset {
		// SetLinger(0): Close sends RST and drops what is unsent.
		if tc, ok := client.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = client.Close()
		_ = server.Close()
	} else {
		closeWrite(client)
	}
	<-done
}

// chunk is data read from the server, due at the client at due.
type chunk struct {
	data []byte
	due  time.Time
}

// relay copies server to client through a delay line and reports whether it
// ended by resetting the client.
func (p *Proxy) relay(client, server net.Conn) (reset bool) {
	chunks := make(chan chunk, 64)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := server.Read(buf)
			if n > 0 {
				chunks <- chunk{data: buf[:n], due: time.Now().Add(p.mode.Load().Latency)}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		for range chunks { // the reader ends once server is closed
		}
	}()
	var sent int64
	for c := range chunks {
		if d := time.Until(c.due); d > 0 {
			time.Sleep(d)
		}
		data := c.data
		if limit := p.mode.Load().ResetAfter; limit > 0 && sent+int64(len(data)) > limit {
			if limit > sent {
				_, _ = client.Write(data[:limit-sent])
			}
			_ = server.Close() // ends the reader
			return true
		}
		if _, err := client.Write(data); err != nil {
			_ = server.Close()
			return false
		}
		sent += int64(len(data))
	}
	return false
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}
