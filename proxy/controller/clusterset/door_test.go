package clusterset

import (
	"errors"
	"fmt"
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

// swap keeps the door index up to date as entries with door names come,
// change and go, while entries without any leave it alone.
func TestSwapKeepsTheDoorIndex(t *testing.T) {
	c := &Controller{doorEntries: map[string]*entry{}}
	c.doors.Store(&map[string]doorSlot{})
	doorErr := func(name string) error { _, err := c.Door(name); return err }
	a := &door.Door{Cluster: "a"}
	c.swap("a", &entry{cluster: &cluster.Cluster{Name: "a"}, door: a, doorNames: []string{"a.example.com"}})
	c.swap("plain", &entry{cluster: &cluster.Cluster{Name: "plain"}})
	if d, err := c.Door("a.example.com"); err != nil || d != a {
		t.Fatalf("after adding a: Door = %v, %v; want a's door", d, err)
	}
	c.swap("b", &entry{cluster: &cluster.Cluster{Name: "b"}, door: &door.Door{Cluster: "b"}, doorNames: []string{"a.example.com"}})
	if err := doorErr("a.example.com"); err == nil || !strings.Contains(err.Error(), "a, b all name it") {
		t.Fatalf("with a and b naming it: %v; want both named", err)
	}
	c.swap("b", nil)
	c.swap("a", &entry{cluster: &cluster.Cluster{Name: "a"}}) // secureServing dropped
	if err := doorErr("a.example.com"); err == nil || !strings.Contains(err.Error(), "no UpstreamCluster serves it") {
		t.Fatalf("after a dropped its door: %v; want none serving it", err)
	}
	if len(c.doorEntries) != 0 {
		t.Errorf("doorEntries = %v; want none", c.doorEntries)
	}
	if c.entry("plain") == nil || c.entry("b") != nil {
		t.Errorf("state: plain %v, b %v; want plain only", c.entry("plain"), c.entry("b"))
	}
}

// BenchmarkSwap installs one cluster's new entry among 10,000: its cost must
// not grow with the clusters registered (docs/benchmark.md, "Per registered
// UpstreamCluster").
func BenchmarkSwap(b *testing.B) {
	c := &Controller{doorEntries: map[string]*entry{}}
	c.doors.Store(&map[string]doorSlot{})
	for i := range 10000 {
		c.swap(fmt.Sprintf("c%05d", i), &entry{})
	}
	b.ReportAllocs()
	for b.Loop() {
		c.swap("c00042", &entry{})
	}
}
