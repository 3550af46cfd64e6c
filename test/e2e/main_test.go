// Package e2e is the end-to-end suite of kube-gateway. It reads as a list of what a
// user can do: every test goes through a real hub kube-apiserver, the gateway and
// real member kube-apiservers, with kubectl or client-go, on loopback.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/kubewharf/kube-gateway/proxy/longrunning"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// env is the environment every test uses; started once by TestMain.
var env *harness.Env

const gatewayRequestTimeout = 5 * time.Second

// longRunningCap is the gateway's --max-long-running-requests-per-user, small
// enough for TestLongRunningRequestsPerUserCap to reach in a second, above
// what any one user of the other tests holds open at once.
const longRunningCap = 30

// fanOutListMemory is the gateway's --fan-out-list-memory: small enough for
// TestFanOutList to pass it with three ConfigMaps, larger than any other
// test's fan-out list.
const fanOutListMemory = 2 << 20

// memberAccessReviewTTL is the gateway's --member-access-review-ttl: how long
// a member's allowed answer is kept, short for TestFleetCacheReads to see a
// RoleBinding's removal take effect.
const memberAccessReviewTTL = 15 * time.Second

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	workDir, err := os.MkdirTemp("", "kube-gateway-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	env, err = harness.Start(ctx, harness.Config{
		WorkDir: workDir,
		Log:     os.Stderr,
		// A short request timeout for the gateway's own non-long-running requests,
		// so that TestLongRunningRequestsOutliveTheGatewayTimeout can prove in
		// seconds that proxied streams are not subject to it.
		GatewayArgs: []string{"--request-timeout=" + gatewayRequestTimeout.String(), "--" + longrunning.Flag + "=" + strconv.Itoa(longRunningCap),
			"--fan-out-list-memory=" + strconv.Itoa(fanOutListMemory),
			// TestFleetCacheReads sees a RoleBinding's removal take effect.
			"--member-access-review-ttl=" + memberAccessReviewTTL.String()},
		// The tests' extra gateways share the suite gateway's replica group:
		// none may divide its flow-control limits. TestLimitsSplitAcrossReplicas
		// grants the rest for itself.
		StatusLeaseOnly: true,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the environment: %v\n(logs in %s)\n", err, filepath.Join(workDir, "logs"))
		return 1
	}
	fmt.Fprintf(os.Stderr, "environment ready in %s (work dir %s)\n", time.Since(start).Round(time.Second), workDir)
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping the environment: %v\n", err)
		code = 1
	}
	if code == 0 {
		_ = os.RemoveAll(workDir)
	} else {
		fmt.Fprintf(os.Stderr, "kept the work dir with every process log: %s\n", workDir)
	}
	return code
}
