package faultproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// echoServer answers every connection with what it reads, and with size bytes
// of payload after the first read.
func echoServer(t *testing.T, size int) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 1024)
				n, err := c.Read(buf)
				if err != nil {
					return
				}
				_, _ = c.Write(buf[:n])
				_, _ = c.Write(bytes.Repeat([]byte("x"), size))
			}()
		}
	}()
	return l.Addr().String()
}

func start(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// exchange sends hello through p and reads until the connection ends.
func exchange(t *testing.T, p *Proxy) ([]byte, error) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	return io.ReadAll(c)
}

func TestPassThrough(t *testing.T) {
	p := start(t, echoServer(t, 100000))
	got, err := exchange(t, p)
	if err != nil {
		t.Fatal(err)
	}
	if want := append([]byte("hello"), bytes.Repeat([]byte("x"), 100000)...); !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes, want the %d the server sent", len(got), len(want))
	}
}

func TestLatency(t *testing.T) {
	p := start(t, echoServer(t, 10))
	p.Set(Mode{Latency: 300 * time.Millisecond})
	began := time.Now()
	got, err := exchange(t, p)
	if err != nil || len(got) != 15 {
		t.Fatalf("got %q, %v; want hello and 10 bytes", got, err)
	}
	// A lower bound only: the delay is the proxy's; more is the machine's.
	if took := time.Since(began); took < 300*time.Millisecond {
		t.Fatalf("the answer came after %s, want at least the 300ms latency", took)
	}
}

func TestResetAfter(t *testing.T) {
	p := start(t, echoServer(t, 1<<20))
	p.Set(Mode{ResetAfter: 1000})
	got, err := exchange(t, p)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("reading %d bytes ended with %v, want a connection reset", len(got), err)
	}
	if len(got) != 1000 {
		t.Fatalf("got %d bytes before the reset, want exactly 1000", len(got))
	}
	// Back to pass-through: new connections are whole again.
	p.Set(PassThrough)
	if got, err := exchange(t, p); err != nil || len(got) != 5+1<<20 {
		t.Fatalf("after pass-through: %d bytes, %v", len(got), err)
	}
}

func TestGarbage(t *testing.T) {
	p := start(t, echoServer(t, 10))
	p.Set(Mode{Garbage: true})
	got, err := exchange(t, p)
	if err != nil || !bytes.Equal(got, GarbageBytes) {
		t.Fatalf("got %q, %v; want %q", got, err, GarbageBytes)
	}
}

func TestCloseStopsListening(t *testing.T) {
	p := start(t, echoServer(t, 0))
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("tcp", p.Addr()); err == nil {
		_ = c.Close()
		t.Fatal("the proxy still accepts connections after Close")
	}
}
