package fanout

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
)

// ListMemory bounds the bytes of member answers that the fan-out lists in
// flight hold together. A fan-out list holds what its members sent until it
// writes it: a page its members' whole pages; a list without limit every
// answer until each member's head is known (the warnings about failed
// members go in headers, before the body, and strict lists fail whole), then
// the answers of the members whose turn has not come. Without a bound, one
// list of a large resource over many members could take more memory than the
// gateway has, and every request it serves would go down with it.
//
// A list that would pass the bound fails at once, and its other member
// requests are cancelled: with 413 when it alone holds more than the bound
// (paging it with limit holds one member's page at a time), with 429 when
// other lists hold the memory (it may pass later); once part of it was sent,
// by breaking the response off. It never waits for memory: lists waiting
// while they hold part of it could wait for each other forever.
//
// The bytes counted are the answers as the gateway holds them, uncompressed;
// the buffers holding them take up to twice that.
//
// Not golang.org/x/sync/semaphore.Weighted: its TryAcquire takes a lock on
// every write of every member's answer, and it neither counts without a
// bound nor tells what is held (Held), which this needs anyway.
type ListMemory struct {
	max      int64
	used     atomic.Int64
	tooLarge atomic.Uint64
	busy     atomic.Uint64
}

// NewListMemory returns a ListMemory of bound bytes; bound <= 0: no bound (the bytes
// held are still counted).
func NewListMemory(bound int64) *ListMemory { return &ListMemory{max: bound} }

// Held is the bytes the fan-out lists in flight hold now.
func (m *ListMemory) Held() int64 { return m.used.Load() }

// Refused counts the lists failed by the bound: alone larger than it, and
// refused while other lists held the memory.
func (m *ListMemory) Refused() (tooLarge, busy uint64) { return m.tooLarge.Load(), m.busy.Load() }

// errListMemory is what a member answer's Write returns once its list went
// over the bound: it aborts that member's request.
var errListMemory = errors.New("the fan-out list went over the gateway's memory bound for fan-out lists")

// hold is one fan-out list's share of a ListMemory. Its members' answers are
// written concurrently.
type hold struct {
	memory *ListMemory // nil: nothing is counted
	held   atomic.Int64
	// cancel ends the list's member requests once it went over the bound.
	cancel context.CancelFunc
	paged  bool

	once sync.Once
	// err is set by once; a streamed list reads it while its members answer.
	err atomic.Pointer[apierrors.StatusError]
}

// newHold starts the share of one list whose member requests cancel ends;
// paged: the client asked for a page (limit). m may be nil.
func (m *ListMemory) newHold(cancel context.CancelFunc, paged bool) *hold {
	return &hold{memory: m, cancel: cancel, paged: paged}
}

// take counts n more bytes of a member's answer; an error means the list
// went over the bound, and has failed.
func (h *hold) take(n int) error {
	if h == nil || h.memory == nil {
		return nil
	}
	m := h.memory
	if used := m.used.Add(int64(n)); m.max <= 0 || used <= m.max {
		h.held.Add(int64(n))
		return nil
	}
	m.used.Add(-int64(n))
	h.fail(h.held.Load() + int64(n))
	return errListMemory
}

// fail records why the list failed, once, and cancels its member requests.
func (h *hold) fail(held int64) {
	h.once.Do(func() {
		m := h.memory
		bound := resource.NewQuantity(m.max, resource.BinarySI).String()
		if held > m.max {
			m.tooLarge.Add(1)
			fix := "page the list with limit (kubectl get --chunk-size, client-go's pager)"
			if h.paged { // a member's page alone, or members that ignore limit
				fix = "ask for fewer items per page (a lower limit, kubectl get --chunk-size)"
			}
			h.err.Store(apierrors.NewRequestEntityTooLargeError(fmt.Sprintf(
				"the members' answers to this fan-out list are larger than %s, the most the gateway holds for fan-out lists (--fan-out-list-memory): %s, or select fewer clusters",
				bound, fix)))
		} else {
			m.busy.Add(1)
			h.err.Store(apierrors.NewTooManyRequests(fmt.Sprintf(
				"other fan-out lists hold the %s the gateway keeps for fan-out lists' member answers (--fan-out-list-memory): "+
					"try again, or page the list with limit to need less", bound), 1))
		}
		h.cancel()
	})
}

// give gives back n bytes of an answer the list no longer holds (one a
// page asked for but does not use).
func (h *hold) give(n int) {
	if h == nil || h.memory == nil {
		return
	}
	n = int(min(int64(n), h.held.Load()))
	h.held.Add(-int64(n))
	h.memory.used.Add(-int64(n))
}

// failed is the error of a list that went over the bound, nil otherwise.
func (h *hold) failed() error {
	if h == nil {
		return nil
	}
	if err := h.err.Load(); err != nil {
		return err
	}
	return nil
}

// release gives back what the list held; its answers are no longer used.
func (h *hold) release() {
	if h == nil || h.memory == nil {
		return
	}
	h.memory.used.Add(-h.held.Swap(0))
}
