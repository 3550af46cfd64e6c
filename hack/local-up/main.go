// Command local-up runs a complete kube-gateway environment on 127.0.0.1 for
// trying things by hand: an etcd for the hub and the members, a hub
// kube-apiserver, member clusters member-a (two apiserver replicas, a stand-in
// kubelet and pod alice/shell) and member-b, a kube-controller-manager per
// cluster, and kube-gateway with its own etcd, registered on the hub. See
// test/harness.
//
//	go run ./hack/local-up up     # start into _output/local-up/, print how to use it, exit 0
//	go run ./hack/local-up down   # stop it
//
// Flags (after the subcommand): --dir (default <repo>/_output/local-up),
// --bin-dir (default $KUBE_GATEWAY_BIN_DIR or <repo>/_output/bin); up also
// takes --no-gateway (hub and members only).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/kubewharf/kube-gateway/test/harness"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "up":
		err = up(os.Args[2:])
	case "down":
		err = down(os.Args[2:])
	case harness.StandInKubeletCommand: // hidden: run by the harness with Detach
		err = harness.StandInKubeletMain(os.Args[2:])
	case "-h", "--help", "help":
		usage()
		return
	default:
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "local-up %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage: local-up up [--dir DIR] [--bin-dir DIR] [--no-gateway]
       local-up down [--dir DIR]

  up    start etcd, a hub, members member-a and member-b (each cluster with a
        kube-controller-manager) and kube-gateway (with its own etcd) on
        127.0.0.1 in the background (state in DIR/state.json), print how to use them
  down  stop what "up" started in DIR
`)
}

type flags struct {
	dir, binDir string
	noGateway   bool
	defaultDir  bool
}

func parse(name string, args []string) (*flags, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	f := &flags{}
	fs.StringVar(&f.dir, "dir", "", "work dir (default <repo>/_output/local-up)")
	fs.StringVar(&f.binDir, "bin-dir", "", "binaries (default $KUBE_GATEWAY_BIN_DIR or <repo>/_output/bin)")
	if name == "up" {
		fs.BoolVar(&f.noGateway, "no-gateway", false, "start etcd, hub and members only (while kube-gateway is not built)")
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if f.dir == "" {
		root, err := harness.RepoRoot()
		if err != nil {
			return nil, err
		}
		f.dir = filepath.Join(root, "_output", "local-up")
		f.defaultDir = true
	}
	abs, err := filepath.Abs(f.dir)
	if err != nil {
		return nil, err
	}
	f.dir = abs
	return f, nil
}

func up(args []string) error {
	f, err := parse("up", args)
	if err != nil {
		return err
	}
	st, err := harness.ReadState(f.dir)
	switch {
	case err == nil:
		if running := st.Running(); len(running) > 0 {
			var names []string
			for _, p := range running {
				names = append(names, fmt.Sprintf("%s (pid %d)", p.Name, p.PID))
			}
			return fmt.Errorf("an environment is already running in %s: %s\nstop it first with: go run ./hack/local-up down",
				f.dir, strings.Join(names, ", "))
		}
		// Stale: its processes are gone. Start afresh.
		if err := os.RemoveAll(f.dir); err != nil {
			return err
		}
	case errors.Is(err, os.ErrNotExist):
		entries, _ := os.ReadDir(f.dir)
		if len(entries) > 0 {
			if !f.defaultDir {
				return fmt.Errorf("%s is not empty and holds no state.json; choose an empty --dir", f.dir)
			}
			// Leftovers of an interrupted run in our own output dir.
			if err := os.RemoveAll(f.dir); err != nil {
				return err
			}
		}
	default:
		return err
	}
	if _, ok := harness.GatewayBinary(f.binDir); !ok && !f.noGateway {
		bin, _ := harness.GatewayBinary(f.binDir)
		return fmt.Errorf("%s is missing: build it with `go build -o _output/bin/kube-gateway ./cmd/kube-gateway` (and `make tools` for etcd, kube-apiserver, kube-controller-manager, kubectl)", bin)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	began := time.Now()
	env, err := harness.Start(ctx, harness.Config{BinDir: f.binDir, WorkDir: f.dir, Detach: true, NoGateway: f.noGateway, MemberDoors: !f.noGateway, Log: os.Stderr})
	if err != nil {
		return err
	}
	printGuide(env, time.Since(began))
	return nil
}

func down(args []string) error {
	f, err := parse("down", args)
	if err != nil {
		return err
	}
	if _, err := harness.ReadState(f.dir); errors.Is(err, os.ErrNotExist) {
		fmt.Printf("nothing is running in %s (no state.json)\n", f.dir)
		return nil
	} else if err != nil {
		return err
	}
	if err := harness.StopFromState(f.dir); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(f.dir, "state.json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	fmt.Printf("stopped the environment in %s (logs kept in %s)\n", f.dir, filepath.Join(f.dir, "logs"))
	return nil
}

// rel shortens path relative to the working directory when it lies below it.
func rel(path string) string {
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	r, err := filepath.Rel(wd, path)
	if err != nil || strings.HasPrefix(r, "..") {
		return path
	}
	return r
}

func printGuide(env *harness.Env, took time.Duration) {
	kc := func(name string) string { return rel(env.Kubeconfig(name)) }
	kubectl := rel(filepath.Join(env.BinDir, "kubectl"))
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("")
	w("kube-gateway local environment is up (%.0fs). Everything keeps running in the background.", took.Seconds())
	w("")
	w("  hub apiserver   %s", env.Hub.Servers[0].URL)
	for _, m := range []string{harness.MemberA, harness.MemberB} {
		var urls []string
		for _, s := range env.Members[m].Servers {
			urls = append(urls, s.URL)
		}
		w("  %-15s %s", m, strings.Join(urls, ", "))
	}
	w("  etcd            %s (hub and members)", env.EtcdURL)
	if env.Gateway != nil {
		w("  kube-gateway    %s (served on the hub as %s)", env.GatewayURL, harness.ProxyPath("<member>"))
		w("  gateway etcd    %s (UpstreamClusters)", env.GatewayEtcdURL)
	} else {
		w("  kube-gateway    not started (--no-gateway): the <user>@<member> kubeconfigs will not work")
	}
	w("")
	w("Kubeconfigs:")
	w("  %-44s hub as admin (system:masters)", kc("hub-admin"))
	w("  %-44s hub as alice (may use upstreamclusters/proxy)", kc("hub-alice"))
	w("  %-44s hub as bob (no rights)", kc("hub-bob"))
	w("  %-44s member-a directly, as admin", kc("member-a-admin"))
	w("  %-44s member-b directly, as admin", kc("member-b-admin"))
	w("  %-44s alice on member-a through hub and gateway (edit in ns alice)", kc("alice@member-a"))
	w("  %-44s alice on member-b through hub and gateway (no rights: 403)", kc("alice@member-b"))
	w("  %-44s admin on member-a through hub and gateway", kc("admin@member-a"))
	w("  %-44s admin on member-b through hub and gateway", kc("admin@member-b"))
	if env.MemberDoorAddress != "" {
		for _, m := range []string{harness.MemberA, harness.MemberB} {
			w("  %-44s %s's own admin certificate through the member door (%s, as %s%s)", kc(harness.DoorKubeconfig(m)), m, env.MemberDoorAddress, m, harness.MemberDoorDomain)
		}
	}
	w("CAs of the apiservers' serving certificates: %s", rel(filepath.Join(env.WorkDir, "clusters", "<cluster>", "ca.crt")))
	w("Controllers: a kube-controller-manager per cluster (namespaces, service accounts and their tokens, ClusterRole aggregation, garbage collection)")
	w("")
	w("Try:")
	w("  %s --kubeconfig %s get upstreamclusters", kubectl, kc("hub-admin"))
	w("  %s --kubeconfig %s get --raw /version", kubectl, kc("alice@member-a"))
	w("  %s --kubeconfig %s get pods -n alice", kubectl, kc("alice@member-a"))
	w("  %s --kubeconfig %s exec -n alice shell -- echo hello", kubectl, kc("alice@member-a"))
	w("  %s --kubeconfig %s exec -it -n alice shell -- cat     # type lines, ^D to end", kubectl, kc("alice@member-a"))
	w("  %s --kubeconfig %s port-forward -n alice pod/shell 8080:80   # the stand-in pod echoes what you send to 127.0.0.1:8080", kubectl, kc("alice@member-a"))
	w("  %s --kubeconfig %s get pods -n alice   # Forbidden: member-b's RBAC applies", kubectl, kc("alice@member-b"))
	if env.MemberDoorAddress != "" {
		w("  %s --kubeconfig %s auth whoami   # member-a's own admin, by the member door", kubectl, kc(harness.DoorKubeconfig(harness.MemberA)))
	}
	w("  %s --kubeconfig %s get --raw %s/version   # Forbidden: bob may not use the proxy", kubectl, kc("hub-bob"), harness.ProxyPath(harness.MemberA))
	w("All at once: %s has every context (hub, member-a, alice@hub, alice@member-a, ...), the hub's admin current:", rel(env.MergedKubeconfig()))
	w("  export KUBECONFIG=%s", env.MergedKubeconfig())
	w("  %s get upstreamclusters", kubectl)
	w("  %s --context alice@member-a get pods -n alice", kubectl)
	w("")
	w("Logs: %s   audit logs of each apiserver: %s", rel(filepath.Join(env.WorkDir, "logs")), rel(filepath.Join(env.WorkDir, "audit")))
	w("Stop: go run ./hack/local-up down   (or make local-down)")
	fmt.Print(b.String())
}
