package flowcontrol

import (
	"math"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/utils/clock"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

// Request is what flow control needs to know about a request.
type Request struct {
	// User is the hub user name (the flow key of distinguisher User).
	User string
	// Namespace of a resource request; "" for cluster-scoped and non-resource
	// requests (the flow key of distinguisher Namespace).
	Namespace string
	// LongRunning marks watch, exec, attach, port-forward, log follow and the like.
	LongRunning bool
}

// Kind is the kind of a schema. Its string is also the reason of a rejection
// in metrics ("MaxInflight", "TokenBucket").
type Kind string

// Kinds of schema.
const (
	KindExempt      Kind = "Exempt"
	KindMaxInflight Kind = "MaxInflight"
	KindTokenBucket Kind = "TokenBucket"
)

const (
	// IdleTimeout is how long a flow of a distinguished schema stays idle (nothing
	// in flight, bucket full, no request) before it may be forgotten.
	IdleTimeout = time.Minute
	// MaxFlows is the most flows one distinguished schema tracks; requests of
	// further flow keys share one overflow flow.
	MaxFlows = 10000

	// sweepPeriod is the least time between two lazy sweeps of a flow table.
	sweepPeriod = IdleTimeout / 4
	// fullSweepPeriod is the least time between two sweeps forced by a full table.
	fullSweepPeriod = time.Second
	// rejectRetryAfter is the Retry-After of refusals that cannot tell better.
	rejectRetryAfter = time.Second
)

// Set is the compiled spec.flowControl of one UpstreamCluster: an immutable map
// from schema name to *Schema. A nil *Set has no schema.
type Set struct {
	schemas map[string]*Schema
}

// NewSet compiles schemas, reusing from prev (may be nil) every *Schema whose name
// and limits did not change, so that a spec change that does not touch a schema
// keeps its state (tokens, in-flight counts). A changed schema gets a new limiter
// at once; requests admitted by the old one release into the old one. Of two
// schemas of the same name (which validation refuses) the first wins. clk nil
// means the real clock. Every schema enforces share of its limits; share nil
// means whole limits.
func NewSet(prev *Set, schemas []gatewayv1alpha1.FlowControlSchema, clk clock.PassiveClock, share *Share) *Set {
	if clk == nil {
		clk = clock.RealClock{}
	}
	s := &Set{schemas: make(map[string]*Schema, len(schemas))}
	for i := range schemas {
		sp := compileSpec(&schemas[i])
		if _, dup := s.schemas[sp.name]; dup {
			continue
		}
		if old := prev.Schema(sp.name); old != nil && old.spec == sp && old.share == share {
			s.schemas[sp.name] = old
			continue
		}
		s.schemas[sp.name] = newSchema(sp, clk, share)
	}
	return s
}

// Schema returns the schema called name, nil if there is none.
func (s *Set) Schema(name string) *Schema {
	if s == nil {
		return nil
	}
	return s.schemas[name]
}

// Len is the number of schemas.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.schemas)
}

// spec is the normalized, comparable form of a FlowControlSchema: two schemas
// with equal specs behave the same, so a limiter can be carried over.
type spec struct {
	name             string
	kind             Kind
	max              int32 // KindMaxInflight
	countLongRunning bool  // KindMaxInflight
	qpsMilli         int64 // KindTokenBucket: requests per 1,000 s
	burst            int32 // KindTokenBucket
	distinguisher    gatewayv1alpha1.FlowDistinguisher
}

func compileSpec(in *gatewayv1alpha1.FlowControlSchema) spec {
	sp := spec{name: in.Name}
	switch {
	case in.Exempt != nil:
		sp.kind = KindExempt
		return sp // a distinguisher means nothing without a limit
	case in.MaxRequestsInflight != nil:
		sp.kind = KindMaxInflight
		sp.max = in.MaxRequestsInflight.Max
		sp.countLongRunning = in.MaxRequestsInflight.CountLongRunning
	case in.TokenBucket != nil:
		sp.kind = KindTokenBucket
		sp.qpsMilli = in.TokenBucket.QPS.MilliValue()
		sp.burst = in.TokenBucket.Burst
	default:
		sp.kind = KindExempt
		return sp
	}
	switch in.Distinguisher {
	case gatewayv1alpha1.FlowDistinguisherUser, gatewayv1alpha1.FlowDistinguisherNamespace:
		sp.distinguisher = in.Distinguisher
	}
	return sp
}

// Schema is one compiled flow-control schema. It is safe for concurrent use. A
// nil *Schema admits everything.
type Schema struct {
	spec  spec
	clock clock.PassiveClock
	share *Share
	// single is the only flow of a schema without distinguisher.
	single *flow
	// flows holds the flows of a schema with a distinguisher.
	flows *flowTable
}

func newSchema(sp spec, clk clock.PassiveClock, share *Share) *Schema {
	s := &Schema{spec: sp, clock: clk, share: share}
	if sp.kind == KindExempt {
		return s
	}
	if sp.distinguisher == "" {
		s.single = s.newFlow()
	} else {
		s.flows = newFlowTable(s.newFlow())
	}
	return s
}

// Name is the schema name.
func (s *Schema) Name() string {
	if s == nil {
		return ""
	}
	return s.spec.name
}

// Kind is the kind of limit the schema enforces.
func (s *Schema) Kind() Kind {
	if s == nil {
		return KindExempt
	}
	return s.spec.kind
}

// Admit decides on one request. ok=false: reject with 429 and Retry-After
// retryAfter (>= 1s, whole seconds). When ok, the caller must call release once
// when the request ends (release is never nil when ok; it is idempotent).
func (s *Schema) Admit(r Request) (release func(), retryAfter time.Duration, ok bool) {
	if s == nil || s.spec.kind == KindExempt {
		return noop, 0, true
	}
	replicas := s.share.current()
	if s.flows == nil {
		var now time.Time
		if s.spec.kind == KindTokenBucket {
			now = s.clock.Now()
		}
		return s.admitFlow(s.single, r, now, replicas)
	}
	key := r.User
	if s.spec.distinguisher == gatewayv1alpha1.FlowDistinguisherNamespace {
		key = r.Namespace
	}
	t := s.flows
	t.mu.Lock()
	now := s.clock.Now()
	f := s.lookupLocked(key, now)
	release, retryAfter, ok = s.admitFlow(f, r, now, replicas)
	t.mu.Unlock()
	return release, retryAfter, ok
}

// Share is the part of every limit this gateway replica enforces: 1/n of it,
// n being the number of live replicas. One Share serves every schema of the
// process; a change applies to each flow at its next admission (an atomic load
// per admission), from the time of the change on, keeping the flow's tokens and
// in-flight count. A nil *Share is one replica: whole limits.
type Share struct {
	clock clock.PassiveClock
	split atomic.Pointer[split]
}

// split is one value of a Share: n replicas since at.
type split struct {
	n  int32
	at time.Time
}

var oneReplica = &split{n: 1}

// NewShare returns the share of a single replica. clk nil means the real clock;
// it must be the clock of the schemas that use the share.
func NewShare(clk clock.PassiveClock) *Share {
	if clk == nil {
		clk = clock.RealClock{}
	}
	s := &Share{clock: clk}
	s.split.Store(oneReplica)
	return s
}

// SetReplicas divides the limits among n replicas from now on; n < 1 counts as 1.
func (s *Share) SetReplicas(n int) {
	n = min(max(n, 1), math.MaxInt32)
	if s.split.Load().n != int32(n) {
		s.split.Store(&split{n: int32(n), at: s.clock.Now()})
	}
}

// Replicas is the number of replicas the limits are divided among.
func (s *Share) Replicas() int32 { return s.current().n }

func (s *Share) current() *split {
	if s == nil {
		return oneReplica
	}
	return s.split.Load()
}

// noop is the release of requests that hold nothing.
func noop() {}

// flow is one budget: an in-flight count or a token bucket.
type flow struct {
	inflight atomic.Int32
	bucket   *rate.Limiter // KindTokenBucket with a valid qps and burst
	// bucketReplicas is the replica count bucket's limit and burst are divided by.
	bucketReplicas atomic.Int32
	// lastSeen is the time of the last request; guarded by the flow table's
	// mutex, unused by the single flow of a schema.
	lastSeen time.Time
}

func (s *Schema) newFlow() *flow {
	f := &flow{}
	if s.spec.kind == KindTokenBucket && s.spec.qpsMilli > 0 && s.spec.burst > 0 {
		n := s.share.Replicas()
		qps, burst := s.bucketShare(n)
		f.bucket = rate.NewLimiter(qps, burst)
		f.bucketReplicas.Store(n)
	}
	return f
}

// bucketShare is the rate and burst of one of n replicas: qps/n (exact, rates
// need not be whole) and burst/n, at least 1 so that every replica admits.
func (s *Schema) bucketShare(n int32) (rate.Limit, int) {
	return rate.Limit(float64(s.spec.qpsMilli) / 1000 / float64(n)), int(max(1, s.spec.burst/n))
}

// inflightShare is the in-flight cap of one of n replicas: max/n, at least 1;
// max <= 0 (the emergency brake) stays 0 everywhere.
func (s *Schema) inflightShare(n int32) int32 {
	if s.spec.max <= 0 {
		return 0
	}
	return max(1, s.spec.max/n)
}

// resplit sets f's bucket to the share sp if it is not already, as of the
// time of the change: the bucket filled at the old rate until then. The tokens
// it holds stay (capped to the new burst at the next admission), so a re-split
// neither refills nor empties a bucket.
func (s *Schema) resplit(f *flow, now time.Time, sp *split) {
	if f.bucketReplicas.Swap(sp.n) == sp.n {
		return
	}
	at := now
	if sp.at.Before(now) && !sp.at.IsZero() {
		at = sp.at
	}
	qps, burst := s.bucketShare(sp.n)
	f.bucket.SetLimitAt(at, qps)
	f.bucket.SetBurstAt(at, burst)
}

// flowIdle says whether f holds no state a new flow would not have at now.
func (s *Schema) flowIdle(f *flow, now time.Time) bool {
	if f.inflight.Load() != 0 {
		return false
	}
	if f.bucket != nil && f.bucket.TokensAt(now) < float64(f.bucket.Burst()) {
		return false
	}
	return true
}

func (s *Schema) admitFlow(f *flow, r Request, now time.Time, sp *split) (func(), time.Duration, bool) {
	switch s.spec.kind {
	case KindMaxInflight:
		limit := s.inflightShare(sp.n)
		if r.LongRunning && !s.spec.countLongRunning {
			if f.inflight.Load() >= limit {
				return nil, rejectRetryAfter, false
			}
			return noop, 0, true
		}
		for {
			n := f.inflight.Load()
			if n >= limit {
				return nil, rejectRetryAfter, false
			}
			if f.inflight.CompareAndSwap(n, n+1) {
				return f.releaser(), 0, true
			}
		}
	case KindTokenBucket:
		if f.bucket == nil {
			return nil, rejectRetryAfter, false
		}
		if f.bucketReplicas.Load() != sp.n {
			s.resplit(f, now, sp)
		}
		if f.bucket.AllowN(now, 1) {
			return noop, 0, true
		}
		return nil, retryAfter(f.bucket.TokensAt(now), float64(f.bucket.Limit())), false
	}
	return noop, 0, true
}

// releaser returns the idempotent release of one in-flight slot of f.
func (f *flow) releaser() func() {
	var done atomic.Bool
	return func() {
		if done.CompareAndSwap(false, true) {
			f.inflight.Add(-1)
		}
	}
}

// retryAfter is the time until a bucket holding tokens gets a whole token at qps
// tokens a second, rounded up to whole seconds, at least 1s.
func retryAfter(tokens, qps float64) time.Duration {
	secs := 1.0
	if missing := 1 - tokens; missing > 0 && qps > 0 {
		secs = math.Max(1, math.Ceil(missing/qps))
	}
	return time.Duration(secs) * time.Second
}
