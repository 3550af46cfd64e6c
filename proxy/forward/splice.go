package forward

import (
	"io"
	"net"
)

// spliceBufferSize is the size of the buffers an upgraded connection is
// copied through, in each direction. Both ends are TLS connections, whose
// Read returns at most one record, 16 KiB of data: a larger buffer would
// never fill, and io.Copy's 32 KiB would hold twice this for nothing.
const spliceBufferSize = 16 << 10

// splicedConn is a client connection hijacked for an upgrade (exec, attach,
// port-forward). UpgradeAwareHandler copies each direction with io.Copy,
// which finds WriteTo (client to member) and ReadFrom (member to client)
// here: they copy through pooled buffers instead of the 32 KiB io.Copy
// allocates for each direction of every session and holds while it lasts.
type splicedConn struct {
	net.Conn
	buffers *bufferPool
}

// WriteTo copies what the client sends to w, the member's connection.
func (c *splicedConn) WriteTo(w io.Writer) (int64, error) { return c.copy(w, c.Conn) }

// ReadFrom copies what r, the member's connection, sends to the client.
func (c *splicedConn) ReadFrom(r io.Reader) (int64, error) { return c.copy(c.Conn, r) }

func (c *splicedConn) copy(dst io.Writer, src io.Reader) (int64, error) {
	buf := c.buffers.Get()
	defer c.buffers.Put(buf)
	// Plain Reader and Writer, so that io.CopyBuffer uses buf and not their
	// own ReadFrom or WriteTo (a TCP connection's falls back to io.Copy).
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, buf)
}
