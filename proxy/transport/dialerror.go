package transport

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
)

// UpgradeAwareHandler dials upgrades (exec, attach, port-forward) itself and
// reports a failed dial as text ("error dialing backend: ..."): the error's
// type, which tells an egress proxy's or a tunnel's failure from the server's,
// is lost. The upgrade transport's dialer keeps it in the request's context
// for the caller to put back.

type dialErrorKey struct{}

// DialError holds the error of a failed dial made with a context of
// KeepDialError.
type DialError struct{ err atomic.Pointer[error] }

// KeepDialError returns a context whose upgrade dials keep their error in
// the DialError returned.
func KeepDialError(ctx context.Context) (context.Context, *DialError) {
	d := &DialError{}
	return context.WithValue(ctx, dialErrorKey{}, d), d
}

// Restore returns err with the dial error kept behind it (errors.Is,
// errors.As), its message unchanged; err as it is when no dial failed or
// err already wraps the dial error.
func (d *DialError) Restore(err error) error {
	kept := d.err.Load()
	if err == nil || kept == nil || errors.Is(err, *kept) {
		return err
	}
	return &restoredError{reported: err, dial: *kept}
}

// restoredError is an error reported as text with the dial error it came
// from.
type restoredError struct{ reported, dial error }

func (e *restoredError) Error() string   { return e.reported.Error() }
func (e *restoredError) Unwrap() []error { return []error{e.reported, e.dial} }

// keepDialError has dial keep its error in the context's DialError, if any.
func keepDialError(dial dialFunc) dialFunc {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		conn, err := dial(ctx, network, address)
		if err != nil {
			if d, ok := ctx.Value(dialErrorKey{}).(*DialError); ok {
				d.err.Store(&err)
			}
		}
		return conn, err
	}
}
