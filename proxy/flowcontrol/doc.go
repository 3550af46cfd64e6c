// Package flowcontrol enforces the flow-control schemas of an UpstreamCluster
// (spec.flowControl.flowControlSchemas) on proxied requests.
//
// A Set is the compiled form of one cluster's schemas: an immutable map from schema
// name to *Schema, built by NewSet once per UpstreamCluster generation and swapped
// in together with the rest of the compiled cluster. A request that a dispatch
// policy sent to a schema calls Schema.Admit once; when admitted it calls the
// returned release exactly once when it ends (release is idempotent, so a second
// call is harmless). When refused, the proxy answers 429 with the returned
// Retry-After, which is at least one second, in whole seconds.
//
// # Kinds of schema
//
//   - exempt: every request is admitted.
//   - maxRequestsInflight{max, countLongRunning}: at most max requests of the flow
//     are in flight at once; Retry-After is 1s (nothing tells when a slot frees).
//     max <= 0 admits nothing.
//   - tokenBucket{qps, burst}: a golang.org/x/time/rate limiter, used without
//     waiting: a request takes a token or is refused at once. The bucket starts
//     full. Retry-After is the time until the next token, rounded up to whole
//     seconds, at least 1s; with an integer qps >= 1 that is always 1s. qps <= 0 or
//     burst <= 0 admits nothing.
//
// A schema that sets none of the three is exempt; one that sets several (which
// validation refuses) is read in the order exempt, maxRequestsInflight,
// tokenBucket, the first one set winning.
//
// # Long-running requests and max in-flight
//
// Long-running requests (watch, exec, attach, port-forward, log follow) are
// admitted by a maxRequestsInflight schema only if a slot is free at admission,
// and then give the slot back at once, unless the schema sets countLongRunning.
// A watch lives for minutes and an exec session for hours: if they held slots, a
// handful of them would hold the whole budget for as long as they live and starve
// every short request of the schema, which is the opposite of what a
// concurrency limit is for (protecting the member from bursts of expensive short
// requests). The admission check still makes a schema that is saturated by short
// requests refuse new watches, and a schema with max 0 still refuses everything.
// With countLongRunning: true a long-running request holds its slot until it
// ends, which bounds the number of open watches/streams instead. A token bucket
// counts every request, long-running or not, at admission.
//
// # Distinguisher: one flow per user or per namespace
//
// Without a distinguisher a schema has one flow: one bucket or one in-flight
// budget shared by every request. With distinguisher User (the hub user name) or
// Namespace (the request namespace; "" for cluster-scoped and non-resource
// requests, which share one flow) every distinct value gets a flow of its own,
// with the schema's full limits, so that one user or namespace cannot use up the
// budget of the others. An unknown distinguisher value counts as none.
//
// Memory is bounded. A flow idle for more than IdleTimeout (one minute) -- no
// request admitted or refused in that time, no request in flight, bucket full --
// is forgotten; forgetting it loses nothing, since a new flow starts in exactly
// that state. There is no background goroutine: the flow table is swept lazily,
// by the admission that finds the last sweep older than a quarter of IdleTimeout
// (so at most once every 15s, O(flows) each time), or, at most once a second,
// by an admission that would create a flow while the table is full. A schema
// holds at most MaxFlows (10,000) flows; beyond the cap, requests of new flow keys
// share a single overflow flow (one more budget with the schema's limits) until
// sweeps make room. So a flood of distinct users/namespaces degrades to sharing a
// budget among the newcomers; it never grows memory past the cap and never takes
// budget from the flows already tracked.
//
// Flows live in one map per schema under one mutex, held only for the lookup
// and the admission decision (tens of nanoseconds); releases are a single atomic
// decrement on the flow the request was admitted by, which is never forgotten
// while it has requests in flight.
//
// # Spec changes
//
// NewSet(prev, ...) reuses the *Schema of prev for every schema whose name and
// limits did not change, so that an edit to other parts of the spec (servers,
// policies, other schemas) keeps tokens and in-flight counts. A schema whose
// limits changed gets a fresh limiter (full bucket, no request in flight) at
// once; the requests admitted by the old limiter release into the old one, which
// is garbage once they have all ended. During that transition a changed
// maxRequestsInflight schema can therefore have up to old max + new max requests
// in flight. Renaming a schema is a change.
//
// # Replicas
//
// A Share divides every limit among the live gateway replicas (package
// replicas counts them): with n replicas a maxRequestsInflight schema allows
// max/n in flight (at least 1; max <= 0 stays 0, so the emergency brake holds
// everywhere), a token bucket refills at qps/n with a burst of burst/n (at
// least 1), per flow of a distinguished schema too. One Share serves every
// schema of the process. A change of n applies to each flow at its next
// admission, from the time of the change (rate.Limiter.SetLimitAt/SetBurstAt):
// tokens and in-flight counts are kept, never reset. A schema compiled with
// another Share is a changed schema for NewSet.
//
// # Cost
//
// Admit allocates nothing for exempt schemas and for token buckets; an
// admission that holds an in-flight slot allocates its release function (two
// small objects). See the benchmarks in this package.
package flowcontrol
