package forward

import (
	"bufio"
	"context"
	"net"
	"net/http"
)

// statusRecorder remembers the status code written to the client. Once the
// client went away, writes succeed without effect: the copy then ends when the
// member's body does (see body), not with an aborted handler.
type statusRecorder struct {
	http.ResponseWriter
	client   context.Context // the client's request
	status   int
	hijacked bool
	// attempt is the attempt under way, or the last one.
	attempt *attempt
	// splice, if set, lends the buffers a hijacked connection is copied
	// through (splicedConn).
	splice *bufferPool
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 && code >= http.StatusOK { // not an informational 1xx
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	n, err := s.ResponseWriter.Write(b)
	if err != nil && s.client.Err() != nil {
		return len(b), nil
	}
	return n, err
}

// Hijack records an upgrade: the member's answer then goes to the raw
// connection, so the code is counted as 101.
func (s *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	s.hijacked = true
	conn, rw, err := s.ResponseWriter.(http.Hijacker).Hijack()
	if err != nil || s.splice == nil {
		return conn, rw, err
	}
	return &splicedConn{Conn: conn, buffers: s.splice}, rw, nil
}

// Unwrap implements responsewriter.UserProvidedDecorator, and lets
// http.ResponseController find the flusher underneath.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusRecorder) code() int {
	switch {
	case s.hijacked:
		return http.StatusSwitchingProtocols
	case s.status == 0:
		return http.StatusOK
	}
	return s.status
}
