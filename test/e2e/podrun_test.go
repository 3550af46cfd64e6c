package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubewharf/kube-gateway/test/chart"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// podRun is a container of a rendered pod, prepared to run on loopback as a
// kubelet would run it: the Secrets and ConfigMaps it mounts are files in a
// directory of their own, its environment is resolved from the render
// (fieldRef, resourceFieldRef, secretKeyRef, configMapKeyRef), and its command
// line is the rendered one with $(VAR) expanded and every mount path replaced
// by its directory. Nothing else is changed here: the caller overrides the
// address flags it must, one by one.
type podRun struct {
	t         *testing.T
	m         *chart.Manifest
	namespace string
	name      string // the pod's name
	spec      corev1.PodSpec
	c         corev1.Container
	mounts    []podMount // longest mount path first
	env       []string   // NAME=value, in the container's order
	envMap    map[string]string
}

type podMount struct {
	path string // in the container
	dir  string // on the host
}

// newPodRun prepares the only container of pod namespace/name, whose volume
// claim templates are claims (a StatefulSet's; each becomes an empty
// directory), under root.
func newPodRun(t *testing.T, m *chart.Manifest, namespace, name string, spec corev1.PodSpec, claims []corev1.PersistentVolumeClaim, root string) *podRun {
	t.Helper()
	if len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
		t.Fatalf("pod %s: %d containers and %d init containers, want one container", name, len(spec.Containers), len(spec.InitContainers))
	}
	r := &podRun{t: t, m: m, namespace: namespace, name: name, spec: spec, c: spec.Containers[0], envMap: map[string]string{}}
	for _, vm := range r.c.VolumeMounts {
		if vm.SubPath != "" || vm.SubPathExpr != "" {
			t.Fatalf("pod %s: volume mount %s uses a subPath, which podRun does not do", name, vm.Name)
		}
		dir := filepath.Join(root, "volumes", vm.Name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		r.materialize(vm.Name, dir, claims)
		r.mounts = append(r.mounts, podMount{path: filepath.Clean(vm.MountPath), dir: dir})
	}
	slices.SortFunc(r.mounts, func(a, b podMount) int { return len(b.path) - len(a.path) })
	for _, ev := range r.c.Env {
		v := r.envValue(ev)
		r.envMap[ev.Name] = v
		r.env = append(r.env, ev.Name+"="+v)
	}
	return r
}

// materialize fills dir with the content of volume.
func (r *podRun) materialize(volume, dir string, claims []corev1.PersistentVolumeClaim) {
	t := r.t
	t.Helper()
	for _, c := range claims {
		if c.Name == volume {
			return // a fresh persistent volume is empty
		}
	}
	i := slices.IndexFunc(r.spec.Volumes, func(v corev1.Volume) bool { return v.Name == volume })
	if i < 0 {
		t.Fatalf("pod %s mounts volume %q, which it does not declare", r.name, volume)
	}
	v := r.spec.Volumes[i]
	switch {
	case v.EmptyDir != nil:
	case v.Secret != nil:
		s := chart.Convert[corev1.Secret](t, r.m.Get(t, "Secret", r.namespace, v.Secret.SecretName))
		data := map[string][]byte{}
		for k, b := range s.Data {
			data[k] = b
		}
		for k, s := range s.StringData {
			data[k] = []byte(s)
		}
		writeVolume(t, dir, "Secret "+s.Name, data, v.Secret.Items, v.Secret.DefaultMode)
	case v.ConfigMap != nil:
		cm := chart.Convert[corev1.ConfigMap](t, r.m.Get(t, "ConfigMap", r.namespace, v.ConfigMap.Name))
		data := map[string][]byte{}
		for k, s := range cm.Data {
			data[k] = []byte(s)
		}
		for k, b := range cm.BinaryData {
			data[k] = b
		}
		writeVolume(t, dir, "ConfigMap "+cm.Name, data, v.ConfigMap.Items, v.ConfigMap.DefaultMode)
	default:
		t.Fatalf("pod %s: volume %q is of a kind podRun does not materialize: %+v", r.name, volume, v.VolumeSource)
	}
}

// writeVolume writes data as the kubelet projects a Secret or ConfigMap: every
// key as a file, or only items at their paths.
func writeVolume(t *testing.T, dir, what string, data map[string][]byte, items []corev1.KeyToPath, defaultMode *int32) {
	t.Helper()
	mode := os.FileMode(0o644)
	if defaultMode != nil {
		mode = os.FileMode(*defaultMode)
	}
	if len(items) == 0 {
		for k := range data {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	for _, it := range items {
		b, ok := data[it.Key]
		if !ok {
			t.Fatalf("%s has no key %q", what, it.Key)
		}
		m := mode
		if it.Mode != nil {
			m = os.FileMode(*it.Mode)
		}
		p := filepath.Join(dir, it.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, m); err != nil {
			t.Fatal(err)
		}
	}
}

// envValue resolves one variable of the container as the kubelet would.
func (r *podRun) envValue(ev corev1.EnvVar) string {
	t := r.t
	t.Helper()
	src := ev.ValueFrom
	switch {
	case src == nil:
		return r.expand(ev.Value)
	case src.FieldRef != nil:
		switch src.FieldRef.FieldPath {
		case "metadata.name":
			return r.name
		case "metadata.namespace":
			return r.namespace
		case "spec.serviceAccountName":
			return r.spec.ServiceAccountName
		case "status.podIP", "status.hostIP":
			return "127.0.0.1"
		}
		t.Fatalf("%s: fieldRef %s is not resolved by podRun", ev.Name, src.FieldRef.FieldPath)
	case src.ResourceFieldRef != nil:
		ref := src.ResourceFieldRef
		if ref.ContainerName != "" && ref.ContainerName != r.c.Name {
			t.Fatalf("%s: resourceFieldRef of container %q, not of %q", ev.Name, ref.ContainerName, r.c.Name)
		}
		kind, res, _ := strings.Cut(ref.Resource, ".")
		list := r.c.Resources.Requests
		if kind == "limits" {
			list = r.c.Resources.Limits
		}
		q, ok := list[corev1.ResourceName(res)]
		if !ok {
			t.Fatalf("%s: the container has no %s (a kubelet would use the node's allocatable)", ev.Name, ref.Resource)
		}
		divisor := int64(1000) // in milli-units: 1
		if !ref.Divisor.IsZero() {
			divisor = ref.Divisor.MilliValue()
		}
		return strconv.FormatInt((q.MilliValue()+divisor-1)/divisor, 10)
	case src.SecretKeyRef != nil:
		s := chart.Convert[corev1.Secret](t, r.m.Get(t, "Secret", r.namespace, src.SecretKeyRef.Name))
		if b, ok := s.Data[src.SecretKeyRef.Key]; ok {
			return string(b)
		}
		if v, ok := s.StringData[src.SecretKeyRef.Key]; ok {
			return v
		}
		t.Fatalf("%s: Secret %s has no key %q", ev.Name, s.Name, src.SecretKeyRef.Key)
	case src.ConfigMapKeyRef != nil:
		cm := chart.Convert[corev1.ConfigMap](t, r.m.Get(t, "ConfigMap", r.namespace, src.ConfigMapKeyRef.Name))
		if v, ok := cm.Data[src.ConfigMapKeyRef.Key]; ok {
			return v
		}
		t.Fatalf("%s: ConfigMap %s has no key %q", ev.Name, cm.Name, src.ConfigMapKeyRef.Key)
	}
	t.Fatalf("%s: unsupported valueFrom %+v", ev.Name, src)
	return ""
}

var envRef = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// expand replaces $(VAR) by the value of a variable defined before, and $$ by
// $, as the kubelet does in env values, command and args.
func (r *podRun) expand(s string) string {
	return envRef.ReplaceAllStringFunc(s, func(ref string) string {
		if ref == "$$" {
			return "$"
		}
		if v, ok := r.envMap[ref[2:len(ref)-1]]; ok {
			return v
		}
		return ref
	})
}

// argv returns the container's command line with binary in place of the
// image's entrypoint (command[0], or the whole command when the image's
// entrypoint runs), $(VAR) expanded and each mount path prefix of an argument
// (or of its value after "=") replaced by that mount's directory.
func (r *podRun) argv(binary string) []string {
	out := []string{binary}
	if len(r.c.Command) > 0 {
		out = append(out, r.c.Command[1:]...)
	}
	out = append(out, r.c.Args...)
	for i := 1; i < len(out); i++ {
		a := r.expand(out[i])
		if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(k, "-") {
			a = k + "=" + r.hostPath(v)
		} else {
			a = r.hostPath(a)
		}
		out[i] = a
	}
	return out
}

// hostPath replaces the mount path p lies under by its directory.
func (r *podRun) hostPath(p string) string {
	for _, m := range r.mounts {
		if p == m.path || strings.HasPrefix(p, m.path+"/") {
			return m.dir + p[len(m.path):]
		}
	}
	return p
}

// containerPort returns the number of the container's port named name (or
// given as a number).
func (r *podRun) containerPort(name string) int32 {
	r.t.Helper()
	for _, p := range r.c.Ports {
		if p.Name == name || strconv.Itoa(int(p.ContainerPort)) == name {
			return p.ContainerPort
		}
	}
	r.t.Fatalf("container %s has no port %q", r.c.Name, name)
	return 0
}

// loopbackPorts gives every container port a free loopback port.
func (r *podRun) loopbackPorts() map[int32]int {
	r.t.Helper()
	ports := map[int32]int{}
	for _, p := range r.c.Ports {
		n, err := harness.FreePort()
		if err != nil {
			r.t.Fatal(err)
		}
		ports[p.ContainerPort] = n
	}
	return ports
}

// ready returns what makes the kubelet call the container ready, as a poll on
// loopback: its startup probe succeeded once, then its readiness probe
// succeeds. Each probe is an HTTP GET with the rendered scheme, path and port
// (through ports, container port to loopback port) that, as the kubelet's,
// does not verify an HTTPS server's certificate.
func (r *podRun) ready(ports func() map[int32]int) func(ctx context.Context) error {
	r.t.Helper()
	if r.c.ReadinessProbe == nil {
		r.t.Fatalf("container %s has no readiness probe", r.c.Name)
	}
	readiness := r.httpProbe("readiness", r.c.ReadinessProbe, ports)
	startup := func(context.Context) error { return nil }
	if r.c.StartupProbe != nil {
		startup = r.httpProbe("startup", r.c.StartupProbe, ports)
	}
	started := false
	return func(ctx context.Context) error {
		if !started {
			if err := startup(ctx); err != nil {
				return err
			}
			started = true
		}
		return readiness(ctx)
	}
}

func (r *podRun) httpProbe(what string, p *corev1.Probe, ports func() map[int32]int) func(ctx context.Context) error {
	r.t.Helper()
	if p.HTTPGet == nil {
		r.t.Fatalf("container %s: the %s probe is not an HTTP GET, which podRun does not do", r.c.Name, what)
	}
	get := p.HTTPGet
	port := r.containerPort(get.Port.String())
	scheme := strings.ToLower(string(get.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // as the kubelet's probes
	return func(ctx context.Context) error {
		u := fmt.Sprintf("%s://127.0.0.1:%d%s", scheme, ports()[port], get.Path)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("%s probe: %w", what, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("%s probe: GET %s: %s: %s", what, u, resp.Status, strings.TrimSpace(string(body)))
		}
		return nil
	}
}

// setFlag sets --flag=value in args, in place of the rendered one if there is
// one (returned as old), else at the end.
func setFlag(args []string, flag, value string) (out []string, old string, had bool) {
	out = slices.Clone(args)
	for i, a := range out {
		if k, v, ok := strings.Cut(a, "="); ok && k == flag {
			out[i] = flag + "=" + value
			return out, v, true
		}
	}
	return append(out, flag+"="+value), "", false
}

// flagValue returns the value of --flag=value in args.
func flagValue(t *testing.T, args []string, flag string) string {
	t.Helper()
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok && k == flag {
			return v
		}
	}
	t.Fatalf("no %s in %q", flag, args)
	return ""
}

// loopbackURLs rewrites the URLs of a flag value, a comma-separated list of
// URL or NAME=URL, to 127.0.0.1 and the loopback port that stands for the
// rendered port (ports); scheme, path and names stay. Each rendered host must
// be host: the name the render must use there (the pod's DNS name, or 0.0.0.0
// for a listener), so that what is rewritten is what would work in a cluster.
func loopbackURLs(t *testing.T, flag, value, host string, ports map[int32]int) string {
	t.Helper()
	parts := strings.Split(value, ",")
	for i, part := range parts {
		name, raw, named := strings.Cut(part, "=")
		if !named {
			raw, name = part, ""
		}
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("%s: %q: %v", flag, raw, err)
		}
		if u.Hostname() != host {
			t.Fatalf("%s: %s names host %q, want %q", flag, raw, u.Hostname(), host)
		}
		port, _ := strconv.Atoi(u.Port())
		lp, ok := ports[int32(port)]
		if !ok {
			t.Fatalf("%s: %s names port %d, which is not a port of the pod", flag, raw, port)
		}
		u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(lp))
		parts[i] = u.String()
		if named {
			parts[i] = name + "=" + parts[i]
		}
	}
	return strings.Join(parts, ",")
}
