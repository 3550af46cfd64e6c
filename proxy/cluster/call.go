package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// CallTimeout bounds one of the gateway's own requests to the member (a
// TokenReview, a SubjectAccessReview, the member's client CA).
const CallTimeout = 10 * time.Second

// ErrNoServer: the member has no enabled server to ask.
var ErrNoServer = errors.New("it has no enabled server to ask")

// Create POSTs in to path on one of c's servers with the gateway's own
// credential (no impersonation) and decodes the created object into out:
// the reviews the gateway asks the member for.
func (c *Cluster) Create(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return c.call(ctx, http.MethodPost, path, body, out)
}

// Get GETs path on one of c's servers with the gateway's own credential and
// decodes the object into out.
func (c *Cluster) Get(ctx context.Context, path string, out any) error {
	return c.call(ctx, http.MethodGet, path, nil, out)
}

func (c *Cluster) call(ctx context.Context, method, path string, body []byte, out any) error {
	e := c.PickServer()
	if e == nil {
		return ErrNoServer
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.URL.JoinPath(path).String(), rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	res, err := e.Transports.Probe.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("%s %s on %s: %w", method, path, e.URL.Host, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%s %s on %s: %w", method, path, e.URL.Host, err)
	}
	if res.StatusCode != http.StatusCreated && res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s on %s: %s: %.200s", method, path, e.URL.Host, res.Status, data)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s on %s: %w", method, path, e.URL.Host, err)
	}
	return nil
}
