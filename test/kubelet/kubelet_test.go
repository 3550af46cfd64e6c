package kubelet

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/client-go/util/exec"

	"github.com/kubewharf/kube-gateway/test/testca"
)

const testTimeout = 30 * time.Second

// standIn is a started stand-in kubelet plus what a kube-apiserver would use to
// reach it: a client config trusting its serving CA and carrying a client certificate.
type standIn struct {
	srv    *Server
	client *rest.Config
	pki    *testPKI
}

func startStandIn(t *testing.T) *standIn {
	t.Helper()
	pki := newTestPKI(t)
	srv, err := Start(t.Context(), Config{CertFile: pki.serverCert, KeyFile: pki.serverKey, ClientCAFile: pki.caFile})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &standIn{srv: srv, pki: pki, client: &rest.Config{
		Host: "https://" + srv.Addr(),
		TLSClientConfig: rest.TLSClientConfig{
			CAData: pki.caPEM, CertData: pki.clientCertPEM, KeyData: pki.clientKeyPEM,
		},
	}}
}

// streamURL builds the URL the kube-apiserver builds for pods/exec and pods/attach
// (pkg/registry/core/pod: /{exec|attach}/ns/pod/container plus PodExecOptions).
func (s *standIn) streamURL(kind string, cmd []string, stdin, tty bool) *url.URL {
	q := url.Values{"output": {"1"}}
	if stdin {
		q.Set("input", "1")
	}
	if tty {
		q.Set("tty", "1")
	} else {
		q.Set("error", "1")
	}
	q["command"] = cmd
	return &url.URL{Scheme: "https", Host: s.srv.Addr(), Path: "/" + kind + "/ns1/pod1/c1", RawQuery: q.Encode()}
}

type result struct {
	stdout, stderr string
	err            error
}

func stream(t *testing.T, executor remotecommand.Executor, stdin io.Reader, tty bool) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	opts := remotecommand.StreamOptions{Stdin: stdin, Stdout: &stdout, Tty: tty}
	if !tty {
		opts.Stderr = &stderr
	}
	err := executor.StreamWithContext(ctx, opts)
	return result{stdout.String(), stderr.String(), err}
}

func (s *standIn) execSPDY(t *testing.T, cmd []string, stdin io.Reader, tty bool) result {
	t.Helper()
	executor, err := remotecommand.NewSPDYExecutor(s.client, http.MethodPost, s.streamURL("exec", cmd, stdin != nil, tty))
	if err != nil {
		t.Fatalf("NewSPDYExecutor: %v", err)
	}
	return stream(t, executor, stdin, tty)
}

func wantOutput(t *testing.T, got result, stdout, stderr string) {
	t.Helper()
	if got.err != nil {
		t.Fatalf("stream: %v", got.err)
	}
	if got.stdout != stdout || got.stderr != stderr {
		t.Fatalf("stdout %q, stderr %q; want %q, %q", got.stdout, got.stderr, stdout, stderr)
	}
}

func wantExitCode(t *testing.T, err error, code int) {
	t.Helper()
	var exitErr exec.CodeExitError
	if !errors.As(err, &exitErr) || exitErr.Code != code {
		t.Fatalf("error %v (%T); want exec.CodeExitError with code %d", err, err, code)
	}
}

func wantRequests(t *testing.T, srv *Server, want ...Request) {
	t.Helper()
	got := srv.Requests()
	if !slices.EqualFunc(got, want, func(a, b Request) bool {
		return a.Kind == b.Kind && a.Namespace == b.Namespace && a.Pod == b.Pod && a.Container == b.Container &&
			slices.Equal(a.Command, b.Command) && a.Port == b.Port
	}) {
		t.Fatalf("Requests() = %+v; want %+v", got, want)
	}
}

func TestExecOverSPDY(t *testing.T) {
	s := startStandIn(t)

	t.Run("echo", func(t *testing.T) {
		wantOutput(t, s.execSPDY(t, []string{"echo", "hello", "world"}, nil, false), "hello world\n", "")
	})
	t.Run("echo with tty", func(t *testing.T) {
		wantOutput(t, s.execSPDY(t, []string{"echo", "hi"}, nil, true), "hi\n", "")
	})
	t.Run("cat copies stdin", func(t *testing.T) {
		in := strings.Repeat("some bytes\x00\xff\n", 10000) // larger than one SPDY frame
		wantOutput(t, s.execSPDY(t, []string{"cat"}, strings.NewReader(in), false), in, "")
	})
	t.Run("env", func(t *testing.T) {
		wantOutput(t, s.execSPDY(t, []string{"env"}, nil, false), "POD=ns1/pod1\nCONTAINER=c1\n", "")
	})
	t.Run("exit code", func(t *testing.T) {
		wantExitCode(t, s.execSPDY(t, []string{"sh", "-c", "exit 3"}, nil, false).err, 3)
	})
	t.Run("unknown command", func(t *testing.T) {
		got := s.execSPDY(t, []string{"ls", "/"}, nil, false)
		wantExitCode(t, got.err, 127)
		if got.stderr != "stand-in kubelet: unknown command\n" {
			t.Fatalf("stderr %q", got.stderr)
		}
	})
	t.Run("GET with pod UID in the path", func(t *testing.T) {
		u := s.streamURL("exec", []string{"echo", "uid"}, false, false)
		u.Path = "/exec/ns2/pod2/0000-uid/c2"
		executor, err := remotecommand.NewSPDYExecutor(s.client, http.MethodGet, u)
		if err != nil {
			t.Fatal(err)
		}
		wantOutput(t, stream(t, executor, nil, false), "uid\n", "")
	})

	execOf := func(cmd ...string) Request {
		return Request{Kind: "exec", Namespace: "ns1", Pod: "pod1", Container: "c1", Command: cmd}
	}
	wantRequests(t, s.srv,
		execOf("echo", "hello", "world"), execOf("echo", "hi"), execOf("cat"), execOf("env"), execOf("sh", "-c", "exit 3"), execOf("ls", "/"),
		Request{Kind: "exec", Namespace: "ns2", Pod: "pod2", Container: "c2", Command: []string{"echo", "uid"}})
}

// The WebSocket protocols the stand-in speaks itself are v1-v4 (what cri-streaming
// serves); a kube-apiserver translates v5 to SPDY before it reaches a kubelet.
func TestExecOverWebSocket(t *testing.T) {
	s := startStandIn(t)
	wsExec := func(t *testing.T, cmd []string, tty bool, protocols ...string) result {
		executor, err := remotecommand.NewWebSocketExecutorForProtocols(s.client, http.MethodGet, s.streamURL("exec", cmd, false, tty).String(), protocols...)
		if err != nil {
			t.Fatal(err)
		}
		return stream(t, executor, nil, tty)
	}

	t.Run("echo v4", func(t *testing.T) {
		wantOutput(t, wsExec(t, []string{"echo", "hello", "world"}, false, "v4.channel.k8s.io"), "hello world\n", "")
	})
	t.Run("echo v4 with tty", func(t *testing.T) {
		wantOutput(t, wsExec(t, []string{"echo", "hello"}, true, "v4.channel.k8s.io"), "hello\n", "")
	})
	t.Run("exit code v4", func(t *testing.T) {
		wantExitCode(t, wsExec(t, []string{"sh", "-c", "exit 3"}, false, "v4.channel.k8s.io").err, 3)
	})
	t.Run("v5 is left to the kube-apiserver", func(t *testing.T) {
		// NewWebSocketExecutor offers only v5.channel.k8s.io.
		executor, err := remotecommand.NewWebSocketExecutor(s.client, http.MethodGet, s.streamURL("exec", []string{"echo", "v5"}, false, false).String())
		if err != nil {
			t.Fatal(err)
		}
		if got := stream(t, executor, nil, false); got.err == nil {
			t.Fatalf("v5 exec succeeded (stdout %q); update the package documentation", got.stdout)
		} else {
			t.Logf("refused as expected: %v", got.err)
		}
	})

	execOf := func(cmd ...string) Request {
		return Request{Kind: "exec", Namespace: "ns1", Pod: "pod1", Container: "c1", Command: cmd}
	}
	wantRequests(t, s.srv, execOf("echo", "hello", "world"), execOf("echo", "hello"), execOf("sh", "-c", "exit 3"))
}

func TestAttachOverSPDY(t *testing.T) {
	s := startStandIn(t)
	executor, err := remotecommand.NewSPDYExecutor(s.client, http.MethodPost, s.streamURL("attach", nil, true, false))
	if err != nil {
		t.Fatal(err)
	}
	wantOutput(t, stream(t, executor, strings.NewReader("ping\n"), false), "attached to ns1/pod1/c1\nping\n", "")
	wantRequests(t, s.srv, Request{Kind: "attach", Namespace: "ns1", Pod: "pod1", Container: "c1"})
}

// forwardSPDY runs client-go's port forwarder (what kubectl port-forward and the
// kube-apiserver's SPDY client use) to the given pod port and returns the local address.
func (s *standIn) forwardSPDY(t *testing.T, podPort int) string {
	t.Helper()
	transport, upgrader, err := spdy.RoundTripperFor(s.client)
	if err != nil {
		t.Fatal(err)
	}
	u := &url.URL{Scheme: "https", Host: s.srv.Addr(), Path: "/portForward/ns1/pod1"}
	d := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(d, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(podPort)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	t.Cleanup(func() {
		close(stop)
		select {
		case <-done:
		case <-time.After(testTimeout):
			t.Error("port forwarder did not stop")
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("ForwardPorts: %v", err)
	case <-time.After(testTimeout):
		t.Fatal("port forwarder not ready")
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		t.Fatalf("GetPorts: %v %v", ports, err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local)))
}

func TestPortForwardOverSPDY(t *testing.T) {
	s := startStandIn(t)
	local := s.forwardSPDY(t, 8080)

	for i := range 2 { // two connections over one forwarding session
		msg := fmt.Sprintf("hello %d through port-forward\n", i)
		if got := echoOnce(t, local, msg); got != msg {
			t.Fatalf("echo %q; want %q", got, msg)
		}
	}
	wantRequests(t, s.srv,
		Request{Kind: "portforward", Namespace: "ns1", Pod: "pod1", Port: 8080},
		Request{Kind: "portforward", Namespace: "ns1", Pod: "pod1", Port: 8080})
}

// echoOnce writes msg on a new connection to addr, half-closes, and reads until EOF.
func echoOnce(t *testing.T, addr, msg string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(testTimeout))
	if _, err := io.WriteString(conn, msg); err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	return string(got)
}

// SPDY tunnelled through WebSocket (kubectl port-forward's default since 1.31) is
// unwrapped by the kube-apiserver; the cri-streaming server does not speak it.
func TestPortForwardSPDYOverWebSocketIsLeftToTheAPIServer(t *testing.T) {
	s := startStandIn(t)
	u := &url.URL{Scheme: "https", Host: s.srv.Addr(), Path: "/portForward/ns1/pod1"}
	d, err := portforward.NewSPDYOverWebsocketDialer(u, s.client)
	if err != nil {
		t.Fatal(err)
	}
	conn, _, err := d.Dial(portforward.PortForwardProtocolV1Name)
	if err == nil {
		conn.Close()
		t.Fatal("tunnelled port-forward was accepted; update the package documentation and test it instead")
	}
	t.Logf("refused as expected: %v", err)
	wantRequests(t, s.srv)
}

// The legacy WebSocket port-forward protocol (ports in the query, one data and one
// error channel per port, each starting with the port number) is what a kube-apiserver
// passes through for WebSocket clients that do not tunnel SPDY. client-go has no
// client for it, so this test speaks its framing directly: one byte of channel number
// in front of every binary message.
func TestPortForwardOverLegacyWebSocket(t *testing.T) {
	s := startStandIn(t)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.pki.caPEM)
	clientCert, err := tls.X509KeyPair(s.pki.clientCertPEM, s.pki.clientKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	dialer := websocket.Dialer{
		TLSClientConfig:  &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{clientCert}},
		Subprotocols:     []string{"v4.channel.k8s.io"},
		HandshakeTimeout: testTimeout,
	}
	ws, resp, err := dialer.DialContext(t.Context(), "wss://"+s.srv.Addr()+"/portForward/ns1/pod1?port=8080", nil)
	if err != nil {
		t.Fatalf("dial: %v (response %v)", err, resp)
	}
	defer ws.Close()
	_ = ws.SetReadDeadline(time.Now().Add(testTimeout))

	port := binary.LittleEndian.AppendUint16(nil, 8080)
	for _, channel := range []byte{0, 1} { // data, then error, each announce the port
		_, msg, err := ws.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if want := append([]byte{channel}, port...); !bytes.Equal(msg, want) {
			t.Fatalf("first message %v; want %v", msg, want)
		}
	}
	payload := []byte("hello through the legacy protocol")
	if err := ws.WriteMessage(websocket.BinaryMessage, append([]byte{0}, payload...)); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for len(got) < len(payload) {
		_, msg, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("read after %q: %v", got, err)
		}
		if len(msg) == 0 || msg[0] != 0 {
			t.Fatalf("unexpected message %q", msg)
		}
		got = append(got, msg[1:]...)
	}
	if !bytes.Equal(got, payload) {
		t.Fatalf("echo %q; want %q", got, payload)
	}
	wantRequests(t, s.srv, Request{Kind: "portforward", Namespace: "ns1", Pod: "pod1", Port: 8080})
}

func TestClientCertificateRequired(t *testing.T) {
	s := startStandIn(t)
	other := newTestPKI(t) // a certificate from a CA the stand-in does not trust
	for name, cfg := range map[string]rest.TLSClientConfig{
		"no client certificate":        {CAData: s.pki.caPEM},
		"untrusted client certificate": {CAData: s.pki.caPEM, CertData: other.clientCertPEM, KeyData: other.clientKeyPEM},
	} {
		t.Run(name, func(t *testing.T) {
			client := rest.CopyConfig(s.client)
			client.TLSClientConfig = cfg
			executor, err := remotecommand.NewSPDYExecutor(client, http.MethodPost, s.streamURL("exec", []string{"echo", "x"}, false, false))
			if err != nil {
				t.Fatal(err)
			}
			got := stream(t, executor, nil, false)
			if got.err == nil {
				t.Fatalf("exec without a trusted client certificate succeeded: %q", got.stdout)
			}
			if !strings.Contains(got.err.Error(), "certificate") {
				t.Fatalf("error %q; want a TLS certificate error", got.err)
			}
			t.Logf("refused as expected: %v", got.err)
		})
	}
	wantRequests(t, s.srv)
}

// Close must end sessions that are still open (an attach waiting for stdin) and
// return only once their goroutines are done; cancelling the Start context closes too.
func TestCloseEndsOpenSessions(t *testing.T) {
	s := startStandIn(t)
	executor, err := remotecommand.NewSPDYExecutor(s.client, http.MethodPost, s.streamURL("attach", nil, true, false))
	if err != nil {
		t.Fatal(err)
	}
	stdinR, stdinW := io.Pipe() // never closed by the client
	defer stdinW.Close()
	stdoutR, stdoutW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := executor.StreamWithContext(t.Context(), remotecommand.StreamOptions{Stdin: stdinR, Stdout: stdoutW, Stderr: io.Discard})
		stdoutW.CloseWithError(err)
		done <- err
	}()
	line, err := bufio.NewReader(stdoutR).ReadString('\n')
	if err != nil || line != "attached to ns1/pod1/c1\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	go io.Copy(io.Discard, stdoutR)

	closed := make(chan error, 1)
	go func() { closed <- s.srv.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Close did not return while an attach session was open")
	}
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatal("client stream did not end after Close")
	}
	if _, err := net.DialTimeout("tcp", s.srv.Addr(), time.Second); err == nil {
		t.Fatal("still accepting connections after Close")
	}

	t.Run("context cancellation", func(t *testing.T) {
		pki := newTestPKI(t)
		ctx, cancel := context.WithCancel(t.Context())
		srv, err := Start(ctx, Config{CertFile: pki.serverCert, KeyFile: pki.serverKey})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		cancel()
		err = wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, testTimeout, true, func(context.Context) (bool, error) {
			conn, err := net.DialTimeout("tcp", srv.Addr(), time.Second)
			if err != nil {
				return true, nil
			}
			conn.Close()
			return false, nil
		})
		if err != nil {
			t.Fatalf("still accepting connections %v after the context ended", testTimeout)
		}
	})
}

// testPKI is a CA with a serving certificate for 127.0.0.1 and a client certificate
// (the kube-apiserver's --kubelet-client-certificate), written where Config wants files.
type testPKI struct {
	caPEM, clientCertPEM, clientKeyPEM []byte
	caFile, serverCert, serverKey      string
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	ca := testca.New(t, "stand-in kubelet test CA")
	server := ca.Issue(t, testca.Spec{CommonName: "stand-in kubelet", Usage: x509.ExtKeyUsageServerAuth, SANs: []string{"127.0.0.1"}})
	serverCertPEM, serverKeyPEM := server.CertPEM, server.KeyPEM
	client := ca.Issue(t, testca.Spec{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"kubeadm:cluster-admins"},
		Usage: x509.ExtKeyUsageClientAuth})
	p := &testPKI{caPEM: ca.PEM, clientCertPEM: client.CertPEM, clientKeyPEM: client.KeyPEM}
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	p.caFile = write("ca.crt", p.caPEM)
	p.serverCert = write("kubelet.crt", serverCertPEM)
	p.serverKey = write("kubelet.key", serverKeyPEM)
	return p
}
