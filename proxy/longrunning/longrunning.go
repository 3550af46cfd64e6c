// Package longrunning caps the long-running proxied requests (watches, log
// streams, exec, attach, port-forward) that one hub user holds open through one
// gateway process, across all upstream clusters.
//
// Neither the hub's API Priority and Fairness nor the generic apiserver's
// in-flight limit counts them, and each costs the gateway memory for as long as
// it is open: without a cap, one user could open streams until the gateway runs
// out of memory. The cap bounds what one user can hold: per-stream cost × cap.
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

// Limiter counts the open long-running requests of each user. It is safe for
// concurrent use. A nil *Limiter admits everything.
type Limiter struct {
	max int

	mu   sync.Mutex
	open map[string]int // user name -> open requests; no zero entries
}

// New returns a limiter that admits at most max open requests per user; nil
// (no limit) when max <= 0.
func New(max int) *Limiter {
	if max <= 0 {
		return nil
	}
	return &Limiter{max: max, open: map[string]int{}}
}

// Max is the per-user limit; 0 for no limit.
func (l *Limiter) Max() int {
	if l == nil {
		return 0
	}
	return l.max
}

// Acquire takes a slot for one request of user. ok=false: the user holds max
// requests already. When ok, the caller must call release when the request
// ends, however it ends; release is idempotent.
func (l *Limiter) Acquire(user string) (release func(), ok bool) {
	if l == nil {
		return noop, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[user] >= l.max {
		return nil, false
	}
	l.open[user]++
	var done atomic.Bool
	return func() {
		if done.CompareAndSwap(false, true) {
			l.release(user)
		}
	}, true
}

func (l *Limiter) release(user string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.open[user] - 1; n > 0 {
		l.open[user] = n
	} else {
		delete(l.open, user)
	}
}

// Open is the number of requests user holds.
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
