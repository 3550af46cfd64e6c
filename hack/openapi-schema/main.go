// Command openapi-schema writes the OpenAPI v2 (swagger) definitions of the
// gateway.kubewharf.io/v1alpha1 types, and of everything they reference
// (ObjectMeta, ...), as JSON. It builds them from the generated
// GetOpenAPIDefinitions with kube-openapi's builder and needs no server.
//
//	go run ./hack/openapi-schema -o FILE   # default: stdout
//
// hack/update-codegen.sh passes the file to applyconfiguration-gen
// (kube_codegen.sh --applyconfig-openapi-schema), which then generates the
// Extract<Kind> functions and the structured-merge-diff schema of
// apis/client/applyconfiguration/internal.
//
// Definitions are named as the gateway serves them: by OpenAPI model name
// (io.kubewharf.gateway.v1alpha1.UpstreamCluster, from
// +k8s:openapi-model-package), with the x-kubernetes-group-version-kind
// extension of the served definitions and the
// list-type/map-type extensions of the generated definitions.
// applyconfiguration-gen however looks its root types up by the REST-friendly
// name of their Go package path
// (com.github.kubewharf.kube-gateway.apis.gateway.v1alpha1.UpstreamCluster), so
// each kind of the package is also written under that name, as a copy (without
// the GVK extension) whose references point to the model names.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kube-openapi/pkg/builder"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/util"
	"k8s.io/kube-openapi/pkg/validation/spec"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
)

const extensionGVK = "x-kubernetes-group-version-kind"

func main() {
	out := flag.String("o", "", "write the JSON to this file instead of stdout")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "openapi-schema: no arguments expected")
		os.Exit(2)
	}
	data, err := schemaJSON()
	if err != nil {
		fmt.Fprintln(os.Stderr, "openapi-schema:", err)
		os.Exit(1)
	}
	if *out == "" {
		_, err = os.Stdout.Write(data)
	} else {
		err = os.WriteFile(*out, data, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "openapi-schema:", err)
		os.Exit(1)
	}
}

func schemaJSON() ([]byte, error) {
	scheme := runtime.NewScheme()
	if err := gatewayv1alpha1.AddServedTypesToScheme(scheme); err != nil {
		return nil, err
	}

	// The GVKs of each definition name, as the gateway's DefinitionNamer
	// computes them (served versions only).
	gvks := map[string][]map[string]interface{}{}
	// Go-path (REST-friendly) name -> model name, for the kinds of our package.
	aliases := map[string]string{}
	prefix := strings.TrimSuffix(gatewayv1alpha1.UpstreamCluster{}.OpenAPIModelName(), "UpstreamCluster")
	for gvk, t := range scheme.AllKnownTypes() {
		name, err := scheme.ToOpenAPIDefinitionName(gvk)
		if err != nil {
			return nil, err
		}
		gvks[name] = append(gvks[name], map[string]interface{}{
			"group": gvk.Group, "version": gvk.Version, "kind": gvk.Kind,
		})
		if strings.HasPrefix(name, prefix) {
			aliases[util.ToRESTFriendlyName(t.PkgPath()+"."+t.Name())] = name
		}
	}
	for _, l := range gvks {
		sort.Slice(l, func(i, j int) bool {
			a, b := l[i], l[j]
			if a["group"] != b["group"] {
				return a["group"].(string) < b["group"].(string)
			}
			if a["version"] != b["version"] {
				return a["version"].(string) < b["version"].(string)
			}
			return a["kind"].(string) < b["kind"].(string)
		})
	}

	// Every type of our package, and what it references.
	var names []string
	for name := range gatewayv1alpha1.GetOpenAPIDefinitions(func(string) spec.Ref { return spec.Ref{} }) {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	sort.Strings(names)

	config := &common.Config{
		Info: &spec.Info{InfoProps: spec.InfoProps{
			Title:   "kube-gateway",
			Version: gatewayv1alpha1.Version,
		}},
		GetDefinitions: gatewayv1alpha1.GetOpenAPIDefinitions,
		GetDefinitionName: func(name string) (string, spec.Extensions) {
			if l, ok := gvks[name]; ok {
				ext := make([]interface{}, len(l))
				for i := range l {
					ext[i] = l[i]
				}
				return name, spec.Extensions{extensionGVK: ext}
			}
			return name, nil
		},
	}
	swagger, err := builder.BuildOpenAPIDefinitionsForResources(config, names...)
	if err != nil {
		return nil, err
	}

	for alias, name := range aliases {
		def, ok := swagger.Definitions[name]
		if !ok {
			return nil, fmt.Errorf("no definition %s", name)
		}
		if _, ok := swagger.Definitions[alias]; ok {
			return nil, fmt.Errorf("definition %s exists already", alias)
		}
		ext := spec.Extensions{}
		for k, v := range def.Extensions {
			if k != extensionGVK {
				ext[k] = v
			}
		}
		if len(ext) == 0 {
			ext = nil
		}
		def.Extensions = ext
		swagger.Definitions[alias] = def
	}

	data, err := json.MarshalIndent(swagger, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}
