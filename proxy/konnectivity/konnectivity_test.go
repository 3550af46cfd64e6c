package konnectivity

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"
	proto "sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"

	"github.com/kubewharf/kube-gateway/test/testca"
)

// noAgentHost is a dial target the fake konnectivity server has no agent for.
const noAgentHost = "no-agent.invalid:443"

// fakeServer is a konnectivity server's frontend (gRPC, mutual TLS) that dials
// the targets itself, as if it were its own agent. It counts the TCP
// connections it accepted and the dials it opened.
type fakeServer struct {
	addr     string
	accepted atomic.Int32
	dialed   atomic.Int32
	// noAgent: it answers every dial as a server that no agent connected to.
	noAgent atomic.Bool
	stop    func()
}

type countingListener struct {
	net.Listener
	n *atomic.Int32
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func startFakeServer(t testing.TB, ca *testca.CA) *fakeServer {
	serving := ca.Issue(t, testca.Spec{CommonName: "konnectivity", Usage: x509.ExtKeyUsageServerAuth, SANs: []string{"127.0.0.1"}})
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{serving.TLS(t)}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeServer{addr: l.Addr().String()}
	g := grpc.NewServer(grpc.Creds(creds))
	proto.RegisterProxyServiceServer(g, s)
	go func() { _ = g.Serve(countingListener{l, &s.accepted}) }()
	s.stop = g.Stop
	t.Cleanup(g.Stop)
	return s
}

// Proxy serves one stream: one dial, then its data, as the konnectivity
// server does for each of a client's dials.
func (s *fakeServer) Proxy(stream proto.ProxyService_ProxyServer) error {
	var (
		mu   sync.Mutex // serializes Send
		conn net.Conn
	)
	send := func(p *proto.Packet) {
		mu.Lock()
		defer mu.Unlock()
		_ = stream.Send(p)
	}
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	const connID = 1
	for {
		pkt, err := stream.Recv()
		if err != nil {
			return nil
		}
		switch pkt.Type {
		case proto.PacketType_DIAL_REQ:
			req := pkt.GetDialRequest()
			rsp := &proto.DialResponse{Random: req.Random, ConnectID: connID}
			if req.Address == noAgentHost || s.noAgent.Load() {
				rsp = &proto.DialResponse{Random: req.Random, Error: "No agent available"}
			} else if conn, err = net.Dial("tcp", req.Address); err != nil {
				rsp = &proto.DialResponse{Random: req.Random, Error: err.Error()}
			} else {
				s.dialed.Add(1)
			}
			send(&proto.Packet{Type: proto.PacketType_DIAL_RSP, Payload: &proto.Packet_DialResponse{DialResponse: rsp}})
			if conn != nil {
				go func(c net.Conn) {
					buf := make([]byte, 32<<10)
					for {
						n, err := c.Read(buf)
						if n > 0 {
							send(&proto.Packet{Type: proto.PacketType_DATA, Payload: &proto.Packet_Data{Data: &proto.Data{ConnectID: connID, Data: append([]byte(nil), buf[:n]...)}}})
						}
						if err != nil {
							send(&proto.Packet{Type: proto.PacketType_CLOSE_RSP, Payload: &proto.Packet_CloseResponse{CloseResponse: &proto.CloseResponse{ConnectID: connID}}})
							return
						}
					}
				}(conn)
			}
		case proto.PacketType_DATA:
			if conn != nil {
				_, _ = conn.Write(pkt.GetData().Data)
			}
		case proto.PacketType_CLOSE_REQ:
			if conn != nil {
				conn.Close()
			}
		}
	}
}

// echoServer echoes lines back; it stands for a member's server.
func echoServer(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadBytes('\n')
					if err != nil {
						return
					}
					if _, err := c.Write(line); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

func clientConfig(t testing.TB, ca *testca.CA, addrs ...string) Config {
	leaf := ca.Issue(t, testca.Spec{CommonName: "kube-gateway", Usage: x509.ExtKeyUsageClientAuth})
	return Config{Addresses: addrs, CertData: leaf.CertPEM, KeyData: leaf.KeyPEM, CAData: ca.PEM}
}

func roundTrip(t testing.TB, conn net.Conn, msg string) {
	t.Helper()
	if _, err := conn.Write([]byte(msg + "\n")); err != nil {
		t.Fatal(err)
	}
	got, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || got != msg+"\n" {
		t.Fatalf("echo %q, %v; want %q", got, err, msg)
	}
}

// Every dial of a Dialer is a stream on one gRPC connection: one TCP
// connection and one TLS handshake with the konnectivity server, whatever the
// number of dials.
func TestDialsShareOneConnection(t *testing.T) {
	ca := testca.New(t, "konnectivity-ca")
	srv := startFakeServer(t, ca)
	target := echoServer(t)
	d, err := New(clientConfig(t, ca, srv.addr))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Retire()
	for i := 0; i < 5; i++ {
		conn, err := d.DialContext(context.Background(), "tcp", target)
		if err != nil {
			t.Fatal(err)
		}
		roundTrip(t, conn, "hello")
		conn.Close()
	}
	if n := srv.accepted.Load(); n != 1 {
		t.Errorf("the konnectivity server accepted %d connections for 5 dials, want 1", n)
	}
}

// Failures on the konnectivity path are dial errors (503 upstream, as a
// refused direct dial) whose text names the konnectivity server and what
// failed.
func TestDialErrorsNameTheTunnel(t *testing.T) {
	ca := testca.New(t, "konnectivity-ca")
	srv := startFakeServer(t, ca)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	unreachable := closed.Addr().String()
	closed.Close()
	for name, tt := range map[string]struct {
		server, target, want string
	}{
		"server unreachable": {unreachable, "member.invalid:6443", "the konnectivity server could not be reached"},
		"no agent":           {srv.addr, noAgentHost, "could not open the connection (no agent of the member connected for this host, or the agent's dial failed): No agent available"},
	} {
		t.Run(name, func(t *testing.T) {
			d, err := New(clientConfig(t, ca, tt.server))
			if err != nil {
				t.Fatal(err)
			}
			defer d.Retire()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err = d.DialContext(ctx, "tcp", tt.target)
			var opErr *net.OpError
			var tunnelErr *Error
			if !errors.As(err, &opErr) || opErr.Op != "dial" || !errors.As(err, &tunnelErr) {
				t.Fatalf("error %v (%T), want a *net.OpError dial error wrapping *Error", err, err)
			}
			for _, want := range []string{"konnectivity server " + tt.server, tt.want, tt.target} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

// A retired Dialer keeps the connections dialed through it until they close.
func TestRetireLetsConnectionsFinish(t *testing.T) {
	ca := testca.New(t, "konnectivity-ca")
	srv := startFakeServer(t, ca)
	target := echoServer(t)
	d, err := New(clientConfig(t, ca, srv.addr))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := d.DialContext(context.Background(), "tcp", target)
	if err != nil {
		t.Fatal(err)
	}
	d.Retire()
	roundTrip(t, conn, "still open")
	conn.Close()
	for _, s := range d.servers {
		select {
		case <-s.tunnel.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("the tunnel to %s was not closed after its last connection", s.address)
		}
	}
}

// With several konnectivity servers, a dial goes through the one that took
// the last dial; one that is down, or that the member's agent is not
// connected to, is passed over for the next, and the next is kept.
func TestDialFailsOverToAnotherServer(t *testing.T) {
	ca := testca.New(t, "konnectivity-ca")
	first, second := startFakeServer(t, ca), startFakeServer(t, ca)
	target := echoServer(t)
	d, err := New(clientConfig(t, ca, first.addr, second.addr))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Retire()
	dial := func(want *fakeServer) {
		t.Helper()
		before := [2]int32{first.dialed.Load(), second.dialed.Load()}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := d.DialContext(ctx, "tcp", target)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		roundTrip(t, conn, "hello")
		after := [2]int32{first.dialed.Load(), second.dialed.Load()}
		if want == first && after != [2]int32{before[0] + 1, before[1]} || want == second && after != [2]int32{before[0], before[1] + 1} {
			t.Fatalf("dials through the servers went from %v to %v, want one more through %s", before, after, want.addr)
		}
	}
	dial(first)
	dial(first)
	first.noAgent.Store(true) // the agent is not connected to it (yet)
	dial(second)
	first.noAgent.Store(false)
	dial(second) // kept
	second.stop()
	dial(first)

	// Through none: the error names each server and what failed there.
	first.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = d.DialContext(ctx, "tcp", target)
	var tunnelErr *Error
	if !errors.As(err, &tunnelErr) {
		t.Fatalf("error %v (%T), want one wrapping *Error", err, err)
	}
	for _, want := range []string{"each of 2 konnectivity servers", "konnectivity server " + first.addr, "konnectivity server " + second.addr} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

// BenchmarkDial compares a dial through a Dialer (a stream on its shared gRPC
// connection) with the konnectivity client's single-use tunnel (a gRPC
// connection and TLS handshake per dial), each followed by one echo.
func BenchmarkDial(b *testing.B) {
	ca := testca.New(b, "konnectivity-ca")
	srv := startFakeServer(b, ca)
	target := echoServer(b)
	cfg := clientConfig(b, ca, srv.addr)
	b.Run("shared", func(b *testing.B) {
		d, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer d.Retire()
		for b.Loop() {
			conn, err := d.DialContext(context.Background(), "tcp", target)
			if err != nil {
				b.Fatal(err)
			}
			roundTrip(b, conn, "x")
			conn.Close()
		}
	})
	b.Run("single-use", func(b *testing.B) {
		cert, _ := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(cfg.CAData)
		creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: "127.0.0.1"})
		for b.Loop() {
			tunnel, err := client.CreateSingleUseGrpcTunnelWithContext(context.Background(), context.Background(), srv.addr, grpc.WithTransportCredentials(creds))
			if err != nil {
				b.Fatal(err)
			}
			conn, err := tunnel.DialContext(context.Background(), "tcp", target)
			if err != nil {
				b.Fatal(err)
			}
			roundTrip(b, conn, "x")
			conn.Close()
			<-tunnel.Done()
		}
	})
}
