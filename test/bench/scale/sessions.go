package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/kubewharf/kube-gateway/test/bench/internal/measure"
	"github.com/kubewharf/kube-gateway/test/harness"
)

// sessionResult is what idle exec sessions through the gateway alone cost it.
type sessionResult struct {
	N        int           // sessions asked for
	Opened   int           // sessions that echoed their first line
	Echoed   int           // of those, sessions that echoed a second line after the snapshot
	Failed   int           // sessions that ended with an error before the bench closed them
	FirstErr string        // the first such error
	OpenTook time.Duration // from the first start to the last first echo

	Before, Open, Closed snapshot
	Settled              bool
	SettleTook           time.Duration
	// Heap profiles before the sessions and with them open, and pprof's
	// top of their difference: where a session's memory goes.
	HeapBeforeFile, HeapOpenFile, HeapTop string
}

// session is one `cat` in the stand-in kubelet's pod, streamed over
// WebSocket as kubectl does by default: what is written to in comes back.
type session struct {
	in    *io.PipeWriter
	lines chan string   // stdout, line by line
	done  chan struct{} // closed when the stream ended
	err   error         // why it ended, once done is closed
}

// sessionPhase opens o.Sessions idle exec sessions to pod alice/shell on
// member-a through the gateway alone (the front-proxy certificate and
// X-Remote-* headers of admin), checks that each carries a line both ways,
// snapshots the gateway, checks each once more, then closes them (stdin
// closed: cat exits 0) and waits for the gateway to let go.
func sessionPhase(ctx context.Context, s *scene, o options) (*sessionResult, error) {
	res := &sessionResult{N: o.Sessions}
	cfg := gatewaySessionConfig(s)
	q := url.Values{"command": {"cat"}, "container": {"main"}, "stdin": {"true"}, "stdout": {"true"}}
	execURL, err := url.Parse(cfg.Host + "/api/v1/namespaces/" + harness.AliceNamespace + "/pods/" + harness.ShellPod + "/exec?" + q.Encode())
	if err != nil {
		return nil, err
	}
	res.Before = s.take(ctx, "before sessions", true)
	res.HeapBeforeFile = filepath.Join(o.OutDir, "kube-gateway-heap-before-sessions.pprof")
	if err := s.saveProfile(ctx, "/debug/pprof/heap", res.HeapBeforeFile); err != nil {
		logf("sessions: heap profile: %v", err)
		res.HeapBeforeFile = ""
	}
	logf("sessions: opening %d idle exec sessions (cat) through the gateway alone, %d at a time", o.Sessions, o.OpenConcurrency)

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sessions := make([]*session, o.Sessions)
	var failed atomic.Int64
	var errOnce sync.Once
	start := time.Now()
	concurrently(sctx, o.Sessions, o.OpenConcurrency, func(i int) {
		ss, err := openSession(sctx, cfg, execURL, fmt.Sprintf("open-%d", i))
		if err != nil {
			failed.Add(1)
			errOnce.Do(func() { res.FirstErr = err.Error() })
			return
		}
		sessions[i] = ss
	})
	res.OpenTook = time.Since(start)
	for _, ss := range sessions {
		if ss != nil {
			res.Opened++
		}
	}
	logf("sessions: %d of %d open in %s", res.Opened, o.Sessions, res.OpenTook.Round(100*time.Millisecond))
	res.Open = s.take(ctx, "sessions open", true)
	if res.HeapBeforeFile != "" {
		res.HeapOpenFile = filepath.Join(o.OutDir, "kube-gateway-heap-sessions.pprof")
		if res.HeapTop, err = s.heapProfile(ctx, res.HeapOpenFile, res.HeapBeforeFile); err != nil {
			logf("sessions: heap profile: %v", err)
			res.HeapOpenFile = ""
		}
	}

	// Idle sessions must still carry data once measured.
	var echoed atomic.Int64
	var wg sync.WaitGroup
	for i, ss := range sessions {
		if ss == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ss.echo(sctx, fmt.Sprintf("again-%d", i)); err != nil {
				failed.Add(1)
				errOnce.Do(func() { res.FirstErr = err.Error() })
				return
			}
			echoed.Add(1)
		}()
	}
	wg.Wait()
	res.Echoed = int(echoed.Load())

	// Closing stdin ends cat, and with it the session, cleanly.
	for _, ss := range sessions {
		if ss != nil {
			_ = ss.in.Close()
		}
	}
	for _, ss := range sessions {
		if ss == nil {
			continue
		}
		select {
		case <-ss.done:
			if ss.err != nil {
				failed.Add(1)
				errOnce.Do(func() { res.FirstErr = ss.err.Error() })
			}
		case <-time.After(time.Minute):
			failed.Add(1)
			errOnce.Do(func() { res.FirstErr = "a session did not end within a minute of its stdin closing" })
		}
	}
	res.Failed = int(failed.Load())
	if res.Settled, res.SettleTook, err = s.settle(ctx, res.Before, o.Settle); err != nil {
		return nil, err
	}
	res.Closed = s.take(ctx, "sessions closed", true)
	logf("sessions: %d echoed again, %d failed; closed, %s later: RSS %s, goroutines %.0f, to member-a %v",
		res.Echoed, res.Failed, res.SettleTook.Round(100*time.Millisecond), measure.MB(float64(res.Closed.RSSKB)), res.Closed.Goroutines, res.Closed.ToMemberA)
	return res, nil
}

// gatewaySessionConfig is a client configuration for member-a through the
// gateway alone, with the identity of the scene's gateway target (what the
// hub's aggregator sends for admin).
func gatewaySessionConfig(s *scene) *rest.Config {
	env := s.env
	certFile, keyFile := env.FrontProxyClientCert()
	headers := s.gateway.Header
	return &rest.Config{
		Host:            env.GatewayURL + harness.ProxyPath(harness.MemberA),
		TLSClientConfig: rest.TLSClientConfig{CAFile: env.GatewayCAFile, CertFile: certFile, KeyFile: keyFile},
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
				req = req.Clone(req.Context())
				for k, v := range headers {
					req.Header[k] = v
				}
				return rt.RoundTrip(req)
			})
		},
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// openSession starts one session and returns once it echoed first.
func openSession(ctx context.Context, cfg *rest.Config, execURL *url.URL, first string) (*session, error) {
	exec, err := remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, execURL.String())
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	outR, outW := io.Pipe()
	ss := &session{in: pw, lines: make(chan string, 1), done: make(chan struct{})}
	go func() {
		ss.err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: pr, Stdout: outW})
		_ = outW.CloseWithError(io.EOF)
		close(ss.done)
	}()
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			ss.lines <- sc.Text()
		}
		close(ss.lines)
	}()
	if err := ss.echo(ctx, first); err != nil {
		_ = pw.Close()
		return nil, err
	}
	return ss, nil
}

// echo writes line and waits for cat to send it back.
func (ss *session) echo(ctx context.Context, line string) error {
	written := make(chan error, 1)
	go func() {
		_, err := io.WriteString(ss.in, line+"\n")
		written <- err
	}()
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	for {
		select {
		case err := <-written:
			if err != nil {
				return fmt.Errorf("writing to the session: %w", err)
			}
			written = nil
		case got, ok := <-ss.lines:
			if !ok {
				<-ss.done
				return fmt.Errorf("the session ended before echoing %q: %v", line, ss.err)
			}
			if got != line {
				return fmt.Errorf("the session echoed %q, want %q", got, line)
			}
			return nil
		case <-deadline.C:
			return fmt.Errorf("no echo of %q within a minute", line)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
