package chain

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// leftOut names each filter of k8s.io/apiserver's DefaultBuildHandlerChain
// that the short chain does not apply, and why. A filter the library adds is
// in neither this list nor New, and fails TestLibraryChain until someone
// decides where it goes.
var leftOut = map[string]string{
	"endpoints/filterlatency.TrackStarted":                "filter latency metrics: the kube_gateway_proxy_* metrics time proxied requests",
	"endpoints/filterlatency.TrackCompleted":              "filter latency metrics: the kube_gateway_proxy_* metrics time proxied requests",
	"endpoints/filters.WithLatencyTrackers":               "filter latency metrics: the kube_gateway_proxy_* metrics time proxied requests",
	"server/filters.WithHTTPLogging":                      "the -v=3 access log: the forwarder logs each proxied request",
	"server/filters.WithPriorityAndFairness":              "lets long-running requests through; every proxied request is long-running (flow-control schemas limit them)",
	"server/filters.WithMaxInFlightLimit":                 "lets long-running requests through; every proxied request is long-running (flow-control schemas limit them)",
	"server/filters.WithTimeoutForNonLongRunningRequests": "lets long-running requests through; every proxied request is long-running",
	"endpoints/filters.WithRequestDeadline":               "sets no deadline on long-running requests; every proxied request is long-running",
	"server/filters.WithWaitGroup":                        "counts only requests that are not long-running; the forwarder's pre-shutdown hook ends proxied streams",
	"server/routine.WithRoutine":                          "runs only requests that are not long-running on a new goroutine; the short chain grows its stack instead (stack.go)",
	"server/filters.WithWatchTerminationDuringShutdown":   "counts only requests whose verb is watch; a proxied request's verb is that of the proxy subresource (get, create, ...)",
	"endpoints/filters.WithMuxAndDiscoveryComplete":       "only the generic server's not-found handler reads it, and the short chain never reaches it",
	// A gap, not a choice: with --shutdown-send-retry-after the generic chain
	// refuses new requests once the shutdown delay has passed, the short
	// chain still forwards them. The filter needs the server's lifecycle
	// signals, which k8s.io/apiserver does not export.
	"server/filters.WithRetryAfter": "needs the generic server's unexported lifecycle signals",
}

// TestLibraryChain fails when DefaultBuildHandlerChain, in the k8s.io/apiserver
// this module builds with, has a filter that is neither in New nor in
// leftOut, when a filter of either is no longer in the library's chain, or
// when the filters both apply are in another order: New copies the library's
// chain by hand, and a dependency bump must not silently drop a filter.
func TestLibraryChain(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/apiserver").Output()
	if err != nil {
		t.Fatalf("go list -m k8s.io/apiserver: %v", err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		t.Fatal("go list -m k8s.io/apiserver: no module folder (not downloaded?)")
	}
	library := filters(t, filepath.Join(dir, "pkg", "server", "config.go"), "DefaultBuildHandlerChain", "k8s.io/apiserver/pkg/server")
	ours := filters(t, "chain.go", "New", "")

	for _, f := range library {
		if _, ok := leftOut[f]; !ok && !slices.Contains(ours, f) {
			t.Errorf("DefaultBuildHandlerChain applies %s: add it to New, or to leftOut with the reason", f)
		}
	}
	for _, f := range ours {
		if !slices.Contains(library, f) {
			t.Errorf("New applies %s, which DefaultBuildHandlerChain no longer does: see what replaced it", f)
		}
		if _, ok := leftOut[f]; ok {
			t.Errorf("New applies %s, which leftOut says it leaves out", f)
		}
	}
	for f := range leftOut {
		if !slices.Contains(library, f) {
			t.Errorf("leftOut names %s, which DefaultBuildHandlerChain no longer applies: remove it", f)
		}
	}

	// Handlers are wrapped from the inside out: the same sequence of calls
	// is the same order of filters.
	shared := slices.DeleteFunc(slices.Clone(library), func(f string) bool { return !slices.Contains(ours, f) })
	if !slices.Equal(ours, shared) {
		t.Errorf("the filters of New are not in the library's order:\n New:    %s\n library: %s",
			strings.Join(ours, ", "), strings.Join(shared, ", "))
	}
}

// filters returns the filters that function fn of file applies, in source
// order, named by their package's import path (less "k8s.io/apiserver/pkg/")
// and function. A filter is a call that wraps a handler and replaces it:
// h = pkg.F(h, ...); calls to the file's own package are named by self.
func filters(t *testing.T, file, fn, self string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	imports := map[string]string{}
	for _, spec := range f.Imports {
		path, _ := strconv.Unquote(spec.Path.Value)
		name := path[strings.LastIndex(path, "/")+1:]
		if spec.Name != nil {
			name = spec.Name.Name
		}
		imports[name] = path
	}
	var body *ast.BlockStmt
	for _, d := range f.Decls {
		if d, ok := d.(*ast.FuncDecl); ok && d.Recv == nil && d.Name.Name == fn {
			body = d.Body
		}
	}
	if body == nil {
		t.Fatalf("%s: no func %s", file, fn)
	}
	var found []string
	ast.Inspect(body, func(n ast.Node) bool {
		assign, ok := n.(*ast.AssignStmt)
		if !ok || len(assign.Lhs) != 1 || len(assign.Rhs) != 1 {
			return true
		}
		target, ok := assign.Lhs[0].(*ast.Ident)
		call, isCall := assign.Rhs[0].(*ast.CallExpr)
		if !ok || !isCall || len(call.Args) == 0 {
			return true
		}
		if arg, ok := call.Args[0].(*ast.Ident); !ok || arg.Name != target.Name {
			return true
		}
		var pkg, name string
		switch fun := call.Fun.(type) {
		case *ast.Ident:
			pkg, name = self, fun.Name
		case *ast.SelectorExpr:
			x, ok := fun.X.(*ast.Ident)
			if !ok {
				t.Fatalf("%s: a filter of an unexpected form at %s", file, fset.Position(call.Pos()))
			}
			pkg, name = imports[x.Name], fun.Sel.Name
		default:
			t.Fatalf("%s: a filter of an unexpected form at %s", file, fset.Position(call.Pos()))
		}
		if pkg == "" {
			t.Fatalf("%s: no import for the filter at %s", file, fset.Position(call.Pos()))
		}
		found = append(found, strings.TrimPrefix(pkg, "k8s.io/apiserver/pkg/")+"."+name)
		return true
	})
	if len(found) == 0 {
		t.Fatalf("%s: no filters found in %s", file, fn)
	}
	return found
}
