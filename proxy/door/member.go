package door

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/kubewharf/kube-gateway/proxy/cluster"
)

// reviewTimeout bounds one TokenReview or SubjectAccessReview on the member.
const reviewTimeout = 10 * time.Second

// errNoServer: the member has no enabled server to ask.
var errNoServer = errors.New("it has no enabled server to ask")

// create POSTs in to path on one of c's servers with the gateway's own
// credential (no impersonation) and decodes the created object into out:
// the door's reviews of the member's own clients.
func create(ctx context.Context, c *cluster.Cluster, path string, in, out any) error {
	e := c.PickServer()
	if e == nil {
		return errNoServer
	}
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.URL.JoinPath(path).String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	res, err := e.Transports.Probe.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("POST %s on %s: %w", path, e.URL.Host, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("POST %s on %s: %w", path, e.URL.Host, err)
	}
	if res.StatusCode != http.StatusCreated && res.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s on %s: %s: %.200s", path, e.URL.Host, res.Status, data)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("POST %s on %s: %w", path, e.URL.Host, err)
	}
	return nil
}
