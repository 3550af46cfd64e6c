package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
	"github.com/kubewharf/kube-gateway/test/faultproxy"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// remoteLabel marks the UpstreamClusters of the remote phase.
const remoteLabel = "bench-remote"

// remoteResult is a fan-out over members far from the gateway: a LIST as
// kubectl get --raw sends it, and the pages of one with limit as kubectl get
// (500 a page) and client-go's pager list.
type remoteResult struct {
	Members  int
	Latency  time.Duration
	Parallel string // the gateway's --fan-out-parallel as given to it; "": its default
	Ready    time.Duration
	List     []time.Duration
	// Paged are the lists page by page, with each of pageLimits.
	Paged []pagedList
	Err   string
}

// remotePhase registers n more UpstreamClusters whose servers are member-a's
// behind relays that delay everything the servers send by latency (as a
// member in another region), then lists a namespace of theirs through the
// hub with a fan-out over them: whole, and page by page.
func remotePhase(ctx context.Context, s *scene, ucs dynamic.NamespaceableResourceInterface, o options) *remoteResult {
	res := &remoteResult{Members: o.RemoteClusters, Latency: o.RemoteLatency, Parallel: gatewayFlag(o.GatewayArgs, "--fan-out-parallel")}
	ma := s.env.Members[harness.MemberA]
	var relays []string
	for _, srv := range ma.Servers {
		u, err := url.Parse(srv.URL)
		if err != nil {
			res.Err = err.Error()
			return res
		}
		relay, err := faultproxy.Start(u.Host)
		if err != nil {
			res.Err = "relay: " + err.Error()
			return res
		}
		defer relay.Close()
		relay.Set(faultproxy.Mode{Latency: o.RemoteLatency})
		relays = append(relays, relay.URL())
	}
	start := time.Now()
	for i := range o.RemoteClusters {
		name := fmt.Sprintf("remote-%04d", i)
		uc := memberACluster(name, remoteLabel, relays)
		if _, err := ucs.Apply(ctx, name, uc, metav1.ApplyOptions{FieldManager: fieldMgr, Force: true}); err != nil {
			res.Err = "applying: " + err.Error()
			return res
		}
	}
	sel := metav1.ListOptions{LabelSelector: remoteLabel + "=true"}
	for {
		list, err := ucs.List(ctx, sel)
		if err == nil {
			if _, ready := countReady(list.Items); ready >= o.RemoteClusters {
				res.Ready = time.Since(start)
				break
			}
		}
		if time.Since(start) > o.ReadyTimeout {
			res.Err = fmt.Sprintf("not all Ready within %s (%v)", o.ReadyTimeout, err)
			return res
		}
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			res.Err = err.Error()
			return res
		}
	}

	base := ucPath + "/" + url.PathEscape(remoteLabel+"=true") + "/proxy/api/v1/namespaces/" + fanOutNS + "/configmaps?" + strictParam
	for i := 0; i < o.ListRepeats && ctx.Err() == nil; i++ {
		t0 := time.Now()
		if _, err := s.hubRoot.Do(ctx, base); err != nil {
			res.Err = "LIST: " + err.Error()
			return res
		}
		res.List = append(res.List, time.Since(t0))
	}
	for _, limit := range pageLimits {
		pl := pagedList{Limit: limit}
		for i := 0; i < o.ListRepeats && ctx.Err() == nil; i++ {
			t0 := time.Now()
			pages, items, err := listPages(ctx, s.hubRoot, fmt.Sprintf("%s&limit=%d", base, limit))
			if err != nil {
				res.Err = "paged LIST: " + err.Error()
				return res
			}
			pl.Took = append(pl.Took, time.Since(t0))
			pl.Pages, pl.Items = pages, items
		}
		res.Paged = append(res.Paged, pl)
	}
	return res
}

// pageLimits are the limits of the paged lists: kubectl get's and client-go's
// pager's default, and one that makes several pages of one item per member.
var pageLimits = []int{500, 50}

// pagedList is one list page by page, repeated.
type pagedList struct {
	Limit        int
	Took         []time.Duration // every page, one after the other
	Pages, Items int
}

// listPages lists path page by page, as client-go's pager does, and counts
// the pages and items.
func listPages(ctx context.Context, t *measure.Target, path string) (pages, items int, err error) {
	cont := ""
	for {
		p := path
		if cont != "" {
			p += "&continue=" + url.QueryEscape(cont)
		}
		req, err := t.NewRequest(ctx, p)
		if err != nil {
			return pages, items, err
		}
		resp, err := t.Client.Do(req)
		if err != nil {
			return pages, items, err
		}
		var page struct {
			Metadata struct{ Continue string }
			Items    []json.RawMessage
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			return pages, items, fmt.Errorf("page %d: %s, %v", pages+1, resp.Status, err)
		}
		pages, items = pages+1, items+len(page.Items)
		if cont = page.Metadata.Continue; cont == "" {
			return pages, items, nil
		}
	}
}

// gatewayFlag is the value of the last --name=value in args, "" when none.
func gatewayFlag(args []string, name string) string {
	v := ""
	for _, a := range args {
		if len(a) > len(name)+1 && a[:len(name)+1] == name+"=" {
			v = a[len(name)+1:]
		}
	}
	return v
}

func (r *report) remoteSection(p func(string, ...any), f *remoteResult) {
	parallel := f.Parallel
	if parallel == "" {
		parallel = "its default"
	}
	p("### Fan-out over %d members %s away\n\n", f.Members, f.Latency)
	p("%d more UpstreamClusters whose two servers are member-a's behind relays that delay what the servers send by %s, as members in another region would (`-remote-clusters`, `-remote-latency`), all Ready %s after the apply; through the hub, a fan-out over them (label selector) of `%s` (each has a few ConfigMaps there), with the gateway's `--fan-out-parallel` at %s:\n\n",
		f.Members, f.Latency, measure.Dur(f.Ready), fanOutNS, parallel)
	p("| fan-out over %d members %s away | time (median of %d) | per member |\n|---|---:|---:|\n", f.Members, f.Latency, len(f.List))
	n := float64(f.Members)
	if len(f.List) > 0 {
		p("| LIST (strict, no limit) | %s | %s |\n", measure.Dur(medianDur(f.List)), measure.Dur(time.Duration(float64(medianDur(f.List))/n)))
	}
	for _, pl := range f.Paged {
		p("| LIST with limit=%d, every page (%d pages, %d items) | %s | %s |\n", pl.Limit, pl.Pages, pl.Items, measure.Dur(medianDur(pl.Took)), measure.Dur(time.Duration(float64(medianDur(pl.Took))/n)))
	}
	if f.Err != "" {
		p("\nNot measured: %s.\n", f.Err)
	}
	p("\n")
}
