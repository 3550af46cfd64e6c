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
// Definitions are named as the gateway serves them, by OpenAPI model name
// (com.github.kubewharf.kube-gateway.apis.gateway.v1alpha1.UpstreamCluster, the
// REST-friendly Go path, which is also how applyconfiguration-gen looks its
// types up), with the x-kubernetes-group-version-kind extension of the served
// definitions and the list-type/map-type extensions of the generated ones.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/kube-openapi/pkg/builder"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	gatewayopenapi "github.com/kubewharf/kube-gateway/registry/upstreamcluster/openapi"
)

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

	prefix := strings.TrimSuffix(gatewayv1alpha1.UpstreamCluster{}.OpenAPIModelName(), "UpstreamCluster")

	// Every type of our package, and what it references.
	var names []string
	for name := range gatewayopenapi.GetOpenAPIDefinitions(func(string) spec.Ref { return spec.Ref{} }) {
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
		GetDefinitions: gatewayopenapi.GetOpenAPIDefinitions,
		// Named and tagged with their group-version-kinds as the gateway serves them.
		GetDefinitionName: openapi.NewDefinitionNamer(scheme).GetDefinitionName,
	}
	swagger, err := builder.BuildOpenAPIDefinitionsForResources(config, names...)
	if err != nil {
		return nil, err
	}

	data, err := json.MarshalIndent(swagger, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}
