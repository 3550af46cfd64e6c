// Package longrunning caps the long-running proxied requests (watches, log
// streams, exec, attach, port-forward) that one hub user holds open through one
// gateway process, across all upstream clusters.
//
// Neither the hub's API Priority and Fairness nor the generic apiserver's
// in-flight limit counts them, and each costs the gateway memory for as long as
// it is open: without a cap, one user could open streams until the gateway runs
// out of memory. The cap bounds what one user can hold: a request takes slots
// in proportion to what it holds open (StreamSlots, SessionSlots), so that
// the cap × a watch's cost bounds the memory of any mix.
//
// Users are keyed by their hub user name, so the replicas of a controller that
// share a service account share one budget. A user's entry exists only while
// the user has a request open, so memory follows the open requests.
package longrunning

import (
	"sync"
	"sync/atomic"
)

// Flag is the kube-gateway flag that sets the per-user limit; errors name it.
const Flag = "max-long-running-requests-per-user"

// Slots one request takes, by what it holds open in the gateway (make
// bench-scale, docs/operations.md).
const (
	// StreamSlots: a watch or a log stream, an HTTP/2 stream on connections
	// that other requests share (docs/benchmark.md, per idle watch).
	StreamSlots = 1
	// SessionSlots: an exec, attach or port-forward session, an upgraded
	// connection into the gateway and one of its own to the member, with a
	// goroutine and a buffer for each direction: about three times a
	// watch's memory (docs/benchmark.md, per exec session).
	SessionSlots = 3
)

// Limiter counts the slots the open long-running requests of each user take.
// It is safe for concurrent use. A nil *Limiter admits everything.
type Limiter struct {
	max int

	mu   sync.Mutex
	open map[string]int // user name -> slots taken; no zero entries
}

// New returns a limiter that gives each user max slots; nil (no limit) when
// max <= 0.
func New(max int) *Limiter {
	if max <= 0 {
		return nil
	}
	return &Limiter{max: max, open: map[string]int{}}
}

// Max is the per-user limit in slots; 0 for no limit.
func (l *Limiter) Max() int {
	if l == nil {
		return 0
	}
	return l.max
}

// Acquire takes slots (StreamSlots or SessionSlots, at least 1) for one
// request of user. ok=false: they do not fit in what is left of the user's
// max. A request larger than max fits only while the user holds nothing, so
// that a limit below SessionSlots still admits one session. When ok, the
// caller must call release when the request ends, however it ends; release
// is idempotent.
func (l *Limiter) Acquire(user string, slots int) (release func(), ok bool) {
	if l == nil {
		return noop, true
	}
	slots = max(slots, 1)
	l.mu.Lock()
	defer l.mu.Unlock()
	held := l.open[user]
	if held+slots > l.max && held > 0 {
		return nil, false
	}
	l.open[user] = held + slots
	var done atomic.Bool
	return func() {
		if done.CompareAndSwap(false, true) {
			l.release(user, slots)
		}
	}, true
}

func (l *Limiter) release(user string, slots int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.open[user] - slots; n > 0 {
		l.open[user] = n
	} else {
		delete(l.open, user)
	}
}

// Open is the number of slots user's open requests take.
func (l *Limiter) Open(user string) int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[user]
}

// Users is the number of users holding at least one request.
func (l *Limiter) Users() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.open)
}

func noop() {}
