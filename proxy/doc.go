// Package proxy is the data plane of kube-gateway: everything between the
// gateway's HTTP server and a member apiserver. It has no code of its own;
// its packages are, in the order a proxied request meets them:
//
//   - chain: the entry decision (the gateway's API only through the hub's
//     front proxy, unless direct access) and the short handler chain of proxy
//     paths (authentication, audit, impersonation, authorization);
//   - frontproxy: verifies the hub's front-proxy certificate once per
//     connection, for the entry decision and the authenticator;
//   - handler: the data plane's entry: a name that selects many clusters goes
//     to fanout, any other name is one member (CONNECT admission, the compiled
//     cluster, forward);
//   - fanout: one list or watch over many members, each answered by
//     fleetcache when it can, else asked through handler;
//   - memberauthz: a member's SubjectAccessReviews, kept a short while: what a
//     user may do there, for fleetcache's answers and door's impersonation;
//   - door: the member door, a listener of its own where a member's own
//     clients come in by host name, authenticated against that member only,
//     then served by handler as their own identity;
//   - forward: carries one request to a member, running the stages below, and
//     streams the answer back (attempts, retries, upgrades);
//   - request: the inner request's attributes (verb, resource, namespace, ...);
//   - dispatch: the first dispatch policy matching them;
//   - longrunning: the per-user cap on open watches, streams and sessions;
//   - flowcontrol: the policy's flow-control schema (exempt, max in-flight,
//     token bucket);
//   - balance: the server that takes the request (RoundRobin, Random,
//     LeastRequest) among the healthy ones;
//   - impersonate: the hub identity as impersonation headers, the client's
//     credentials stripped;
//   - transport, konnectivity: pooled connections to a server, directly,
//     through an egress proxy or through a konnectivity tunnel;
//   - health: active probes and passive failure reports that decide which
//     servers balance may pick;
//   - failure: what a failed member request was (timeout, egress proxy,
//     tunnel, connection), decided once from typed errors for forward and
//     health;
//   - cluster: a compiled UpstreamCluster, the immutable state all of the
//     above read;
//   - metrics: the Prometheus metrics of the data plane.
//
// Beside the requests, the controllers in proxy/controller keep that state:
// clusterset compiles UpstreamClusters and their Secrets into clusters and
// swaps them in; status writes what health observes into the objects' status
// and Events; replicas counts live gateway replicas so that flow-control
// limits are split among them; served checks dispatch rules against what a
// member serves. fleetcache keeps a cache of each CachedResource's resource
// per selected member, which status reports and fanout reads.
package proxy
