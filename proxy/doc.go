// Package proxy is the data plane of kube-gateway: everything between the proxy
// subresource handler and a member apiserver. One package per stage:
//
//   - clusters: watches UpstreamClusters and their Secrets, compiles each into an
//     immutable cluster.Cluster and swaps it in atomically;
//   - cluster: a compiled member cluster (endpoints, transports, identity policy);
//   - transport: pooled transports toward a member, with the gateway's credential;
//   - impersonate: the hub identity turned into impersonation headers, inbound
//     credentials stripped;
//   - forward: the per-request handler around UpgradeAwareHandler.
package proxy
