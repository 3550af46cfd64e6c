package clusterset

import (
	"errors"
	"strings"
	"testing"

	"github.com/kubewharf/kube-gateway/proxy/cluster"
	"github.com/kubewharf/kube-gateway/proxy/door"
)

// Door finds the door of a server name, or says why none serves it: no
// cluster names it, two do, the cluster or its door cannot be used.
func TestDoorLookup(t *testing.T) {
	served := &door.Door{Cluster: "a"}
	m := map[string]*entry{
		"a":      {cluster: &cluster.Cluster{Name: "a"}, door: served, doorNames: []string{"a.example.com", "a.internal"}},
		"b":      {cluster: &cluster.Cluster{Name: "b"}, door: &door.Door{Cluster: "b"}, doorNames: []string{"shared.example.com"}},
		"c":      {cluster: &cluster.Cluster{Name: "c"}, door: &door.Door{Cluster: "c"}, doorNames: []string{"shared.example.com"}},
		"broken": {err: errors.New("its credential Secret kube-gateway/broken was not found on the hub"), doorNames: []string{"broken.example.com"}},
		"nodoor": {cluster: &cluster.Cluster{Name: "nodoor"}, doorErr: errors.New("its member-door Secret kube-gateway/d was not found on the hub"), doorNames: []string{"nodoor.example.com"}},
		"plain":  {cluster: &cluster.Cluster{Name: "plain"}},
	}
	c := &Controller{}
	c.doors.Store(doorIndex(m))
	for _, name := range []string{"a.example.com", "a.internal"} {
		if d, err := c.Door(name); err != nil || d != served {
			t.Errorf("Door(%s) = %v, %v; want a's door", name, d, err)
		}
	}
	for name, want := range map[string]string{
		"unknown.example.com": "no UpstreamCluster serves it",
		"shared.example.com":  "UpstreamClusters b, c all name it",
		"broken.example.com":  `upstream cluster "broken" cannot be used: its credential Secret`,
		"nodoor.example.com":  `upstream cluster "nodoor": its member-door Secret`,
	} {
		if d, err := c.Door(name); d != nil || err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Door(%s) = %v, %v; want an error saying %q", name, d, err, want)
		}
	}
}
