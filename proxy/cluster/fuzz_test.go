package cluster_test

import (
	"encoding/json"
	"testing"

	"sigs.k8s.io/yaml"

	gatewayv1alpha1 "github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1"
	"github.com/kubewharf/kube-gateway/apis/gateway/v1alpha1/validation"
	"github.com/kubewharf/kube-gateway/proxy/cluster"
)

// FuzzValidateThenCompile decodes a fuzzed UpstreamCluster spec, defaults it
// as the API does and validates it: validation must not panic, and whatever it
// accepts must compile (an accepted object the data plane cannot use would
// only fail later, as a status problem nobody was warned of at write time).
func FuzzValidateThenCompile(f *testing.F) {
	for _, seed := range fuzzSeeds {
		f.Add([]byte(seed))
	}
	cred := secret(map[string][]byte{"token": []byte(token)})
	f.Fuzz(func(t *testing.T, specJSON []byte) {
		uc := &gatewayv1alpha1.UpstreamCluster{}
		uc.Name, uc.Generation = "member-a", 1
		if err := yaml.Unmarshal(specJSON, &uc.Spec); err != nil {
			return
		}
		gatewayv1alpha1.SetObjectDefaults_UpstreamCluster(uc)
		if errs := validation.ValidateUpstreamCluster(uc, validation.Options{SecretNamespace: "kube-gateway"}); len(errs) > 0 {
			return
		}
		cred := cred.DeepCopy() // the Secret the reference names, with a usable token
		cred.Namespace, cred.Name = uc.Spec.ClientConfig.SecretRef.Namespace, uc.Spec.ClientConfig.SecretRef.Name
		c, err := cluster.Compile(uc, cred, nil, nil, cluster.Options{})
		if err != nil {
			spec, _ := json.Marshal(uc.Spec)
			t.Fatalf("validation accepted a spec that does not compile: %v\nspec: %s", err, spec)
		}
		c.CloseIdleConnections()
	})
}

// fuzzSeeds are valid specs: every field the API has, in a few shapes.
var fuzzSeeds = []string{
	`{"servers":[{"endpoint":"https://192.0.2.10:6443"}],"clientConfig":{"secretRef":{"namespace":"kube-gateway","name":"member-a-cred"}}}`,
	`{"servers":[{"endpoint":"https://192.0.2.10:6443"},{"endpoint":"https://[2001:db8::1]:6443","disabled":true}],
		  "clientConfig":{"secretRef":{"namespace":"kube-gateway","name":"member-a-cred"},"serverName":"member","insecure":false},
		  "healthCheck":{"path":"/livez","intervalSeconds":10,"timeoutSeconds":3,"healthyThreshold":2,"unhealthyThreshold":4}}`,
	`{"servers":[{"endpoint":"https://192.0.2.10:6443"},{"endpoint":"https://192.0.2.11:6443"}],
		  "clientConfig":{"secretRef":{"namespace":"kube-gateway","name":"member-a-cred"}},
		  "flowControl":{"flowControlSchemas":[{"name":"fast","tokenBucket":{"qps":10,"burst":20},"distinguisher":"User"},{"name":"cap","maxRequestsInflight":{"max":5,"countLongRunning":true}},{"name":"free","exempt":{}}]},
		  "dispatchPolicies":[{"name":"reads","rules":[{"verbs":["get","list"],"apiGroups":["*"],"resources":["pods","*/status"],"namespaces":["web"]}],"upstreamSubset":["https://192.0.2.11:6443"],"strategy":"LeastRequest","flowControlSchemaName":"fast"},
		    {"rules":[{"verbs":["-post"],"nonResourceURLs":["/healthz/*"],"users":["system:node:*"],"groups":["-system:masters"]}],"strategy":"Random"}]}`,
	`{"servers":[{"endpoint":"https://member.example.com"}],"clientConfig":{"secretRef":{"namespace":"kube-gateway","name":"member-a-cred"}},
		  "impersonation":{"userPrefix":"hub:","groupPrefix":"hub:","groups":{"deny":["system:masters"]},"extras":{"allow":["scopes"]}}}`,
}

// The seeds pass validation, so that the fuzzer starts from specs that reach
// Compile.
func TestFuzzSeedsAreValid(t *testing.T) {
	for i, seed := range fuzzSeeds {
		uc := &gatewayv1alpha1.UpstreamCluster{}
		uc.Name = "member-a"
		if err := yaml.Unmarshal([]byte(seed), &uc.Spec); err != nil {
			t.Fatalf("seed %d: %v", i, err)
		}
		gatewayv1alpha1.SetObjectDefaults_UpstreamCluster(uc)
		if errs := validation.ValidateUpstreamCluster(uc, validation.Options{SecretNamespace: "kube-gateway"}); len(errs) > 0 {
			t.Errorf("seed %d: %v", i, errs)
		}
	}
}
