package forward

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"testing"
)

// pipeConn is the client's side of a hijacked connection: it reads what the
// client sent and keeps what is written to it.
type pipeConn struct {
	net.Conn // nil: only Read and Write are used
	in       io.Reader
	out      bytes.Buffer
}

func (c *pipeConn) Read(p []byte) (int, error)  { return c.in.Read(p) }
func (c *pipeConn) Write(p []byte) (int, error) { return c.out.Write(p) }

// onlyReader and onlyWriter stand for the member's connection.
type onlyReader struct{ io.Reader }
type onlyWriter struct{ io.Writer }

// An upgraded session copies both ways through splicedConn as io.Copy finds
// it, with buffers smaller than what it carries: every byte arrives.
func TestSplicedConnCopiesBothWays(t *testing.T) {
	payload := make([]byte, 1<<20+123)
	_, _ = rand.Read(payload)
	pool := newBufferPool(spliceBufferSize)

	// Client to member: io.Copy(member, hijacked) uses WriteTo.
	up := &splicedConn{Conn: &pipeConn{in: bytes.NewReader(payload)}, buffers: pool}
	var member bytes.Buffer
	if n, err := io.Copy(onlyWriter{&member}, up); err != nil || n != int64(len(payload)) || !bytes.Equal(member.Bytes(), payload) {
		t.Fatalf("client to member: %d bytes, %v; the member got %d bytes, equal: %t", n, err, member.Len(), bytes.Equal(member.Bytes(), payload))
	}
	// Member to client: io.Copy(hijacked, member) uses ReadFrom.
	client := &pipeConn{}
	down := &splicedConn{Conn: client, buffers: pool}
	if n, err := io.Copy(down, onlyReader{bytes.NewReader(payload)}); err != nil || n != int64(len(payload)) || !bytes.Equal(client.out.Bytes(), payload) {
		t.Fatalf("member to client: %d bytes, %v; the client got %d bytes, equal: %t", n, err, client.out.Len(), bytes.Equal(client.out.Bytes(), payload))
	}
}
