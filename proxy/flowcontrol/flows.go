package flowcontrol

import (
	"strings"
	"sync"
	"time"
)

// flowTable holds the flows of a schema with a distinguisher.
type flowTable struct {
	mu sync.Mutex
	// flows by key; at most maxFlows entries.
	flows map[string]*flow
	// overflow is shared by the keys that found the table full; never forgotten.
	overflow *flow
	// lastSweep is when the table was last swept.
	lastSweep time.Time
	// maxFlows is MaxFlows; a field so that tests may lower it.
	maxFlows int
	// highWater is the most flows held since the map was last rebuilt: Go maps do
	// not shrink, so a sweep that leaves far fewer rebuilds it.
	highWater int
}

func newFlowTable(overflow *flow) *flowTable {
	return &flowTable{flows: map[string]*flow{}, overflow: overflow, maxFlows: MaxFlows}
}

// lookupLocked returns the flow of key, creating it if needed, after sweeping the
// table if it is due. The caller holds s.flows.mu; the flow returned is not
// forgotten before the caller releases the mutex, and not while it has requests
// in flight.
func (s *Schema) lookupLocked(key string, now time.Time) *flow {
	t := s.flows
	if now.Sub(t.lastSweep) >= sweepPeriod {
		s.sweepLocked(now)
	}
	f := t.flows[key]
	if f == nil {
		if len(t.flows) >= t.maxFlows && now.Sub(t.lastSweep) >= fullSweepPeriod {
			s.sweepLocked(now)
		}
		if len(t.flows) >= t.maxFlows {
			f = t.overflow
		} else {
			f = s.newFlow()
			// Own the key: it may be a substring of a large request path or header.
			t.flows[strings.Clone(key)] = f
			t.highWater = max(t.highWater, len(t.flows))
		}
	}
	f.lastSeen = now
	return f
}

// sweepLocked forgets the flows idle for more than IdleTimeout. The caller holds
// s.flows.mu: no admission runs meanwhile, and releases only lower in-flight
// counts, so a flow found with nothing in flight holds no request.
func (s *Schema) sweepLocked(now time.Time) {
	t := s.flows
	t.lastSweep = now
	for k, f := range t.flows {
		if now.Sub(f.lastSeen) > IdleTimeout && s.flowIdle(f, now) {
			delete(t.flows, k)
		}
	}
	if t.highWater >= 1024 && len(t.flows) < t.highWater/4 {
		m := make(map[string]*flow, len(t.flows))
		for k, f := range t.flows {
			m[k] = f
		}
		t.flows, t.highWater = m, len(m)
	}
}

// flowCount is the number of flows tracked (tests).
func (s *Schema) flowCount() int {
	if s.flows == nil {
		return 1
	}
	s.flows.mu.Lock()
	defer s.flows.mu.Unlock()
	return len(s.flows.flows)
}
