// Package chart runs the helm that `make tools` builds (hack/tools/helm) on the
// charts in charts/ and decodes what it renders. Its own tests are the checks
// that need nothing but helm (lint, template, the values schema); the end-to-end
// suite (test/e2e) uses the same helpers for the checks that need the hub.
package chart

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/kubewharf/kube-gateway/test/harness"
)

// Release is the release name the charts are rendered with.
const Release = "kube-gateway"

// Path returns the directory of chart name in charts/.
func Path(t testing.TB, name string) string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "charts", name)
}

// Helm is the helm binary Bin, run with private cache, config and data dirs
// under Home.
type Helm struct {
	Bin, Home string
}

// DefaultHelm is the helm in $KUBE_GATEWAY_BIN_DIR, else <repo root>/_output/bin,
// with a home of its own that is removed when the test ends.
func DefaultHelm(t testing.TB) Helm {
	t.Helper()
	binDir, err := harness.DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	return Helm{Bin: filepath.Join(binDir, "helm"), Home: t.TempDir()}
}

// Cmd returns helm with args, without KUBECONFIG or HELM_* from the caller's
// environment.
func (h Helm) Cmd(ctx context.Context, t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	if st, err := os.Stat(h.Bin); err != nil || st.IsDir() {
		t.Fatalf("no helm at %s: run `make tools` (builds it from hack/tools/helm), or set KUBE_GATEWAY_BIN_DIR to the directory that has it", h.Bin)
	}
	cmd := exec.CommandContext(ctx, h.Bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBECONFIG=") && !strings.HasPrefix(kv, "HELM_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env,
		"HELM_CACHE_HOME="+filepath.Join(h.Home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(h.Home, "config"),
		"HELM_DATA_HOME="+filepath.Join(h.Home, "data"))
	return cmd
}

// Run runs helm with args and returns its standard output; the error carries
// its standard error.
func (h Helm) Run(ctx context.Context, t testing.TB, args ...string) (string, error) {
	t.Helper()
	cmd := h.Cmd(ctx, t, args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// Render runs helm template for release Release of chart in namespace ns.
func (h Helm) Render(ctx context.Context, t testing.TB, chart, ns string, args ...string) *Manifest {
	t.Helper()
	out, err := h.Run(ctx, t, append([]string{"template", Release, Path(t, chart), "--namespace", ns}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return Parse(t, out)
}

// Manifest is a rendered chart.
type Manifest struct {
	YAML string
	Objs []*unstructured.Unstructured
}

// Parse decodes the objects of a rendered chart.
func Parse(t testing.TB, y string) *Manifest {
	t.Helper()
	m := &Manifest{YAML: y}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(y), 4096)
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return m
			}
			t.Fatalf("rendered manifest: %v", err)
		}
		if s := strings.TrimSpace(string(raw)); s == "" || s == "null" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw); err != nil {
			t.Fatalf("rendered object: %v\n%s", err, raw)
		}
		m.Objs = append(m.Objs, u)
	}
}

// All returns the objects of kind.
func (m *Manifest) All(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range m.Objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// Find returns the object of kind named namespace/name, or nil.
func (m *Manifest) Find(kind, namespace, name string) *unstructured.Unstructured {
	for _, o := range m.All(kind) {
		if o.GetName() == name && o.GetNamespace() == namespace {
			return o
		}
	}
	return nil
}

// Get returns the object of kind named namespace/name and fails the test
// without one.
func (m *Manifest) Get(t testing.TB, kind, namespace, name string) *unstructured.Unstructured {
	t.Helper()
	if o := m.Find(kind, namespace, name); o != nil {
		return o
	}
	var have []string
	for _, o := range m.Objs {
		have = append(have, o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName())
	}
	t.Fatalf("no %s %s/%s rendered; have %v", kind, namespace, name, have)
	return nil
}

// One returns the only object of kind.
func (m *Manifest) One(t testing.TB, kind string) *unstructured.Unstructured {
	t.Helper()
	if objs := m.All(kind); len(objs) == 1 {
		return objs[0]
	}
	t.Fatalf("want exactly one %s, have %d", kind, len(m.All(kind)))
	return nil
}

// Convert decodes u into a T, refusing unknown fields.
func Convert[T any](t testing.TB, u *unstructured.Unstructured) *T {
	t.Helper()
	var out T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &out, true); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return &out
}
