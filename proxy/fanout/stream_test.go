package fanout

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// streamJSON merges bodies, the answers of clusters, as a list without limit
// merges answers still arriving when the list begins: each answer's last
// byte comes once the list has read all before it.
func streamJSON(t testing.TB, clusters, bodies []string, strict bool) ([]byte, []string, error) {
	t.Helper()
	results := make([]result, len(bodies))
	var feeders sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer feeders.Wait()
	defer cancel() // the list read what it reads
	for i, body := range bodies {
		s := newMemberStream(clusters[i], nil)
		s.start(context.Background(), func() {})
		b := []byte(body)
		_, _ = s.Write(b[:len(b)-1])
		feeders.Add(1)
		go func() {
			defer feeders.Done()
			err := wait.PollUntilContextTimeout(ctx, 50*time.Microsecond, 10*time.Second, true, func(context.Context) (bool, error) {
				s.mu.Lock()
				defer s.mu.Unlock()
				return s.read == int64(len(b)-1), nil
			})
			if err != nil && ctx.Err() == nil {
				t.Errorf("%s: the list did not read the answer: %v", clusters[i], err)
			}
			_, _ = s.Write(b[len(b)-1:])
			s.finish(nil)
		}()
		results[i] = s.head()
	}
	merged, warnings, err := merge(results, strict)
	if err != nil {
		return nil, warnings, err
	}
	var out bytes.Buffer
	err = merged.writeTo(&out)
	return out.Bytes(), warnings, err
}

// A streamed list is the list merged from whole answers: items, rows and
// their cluster, whatever their shape.
func TestStreamedAsMergedWhole(t *testing.T) {
	for _, c := range []struct {
		name   string
		bodies []string
	}{
		{"lists", []string{podListA, podListB}},
		{"tables", []string{tableA, tableB}},
		{"many items", []string{string(configMapList(300)), string(configMapList(1))}},
		{"many rows", []string{string(configMapTable(300)), string(configMapTable(2))}},
		{"unusual items", []string{`{"kind":"XList","apiVersion":"v1","metadata":{},"items":[{"metadata":{"annotations":{"gateway.kubewharf.io/cluster":"forged"}}},` +
			`{"metadata":null},{},7,{"metadata":{"annotations":null}},{"metadata":{"name":"a"},"metadata":{"name":"b"}}]}`,
			`{"kind":"XList","apiVersion":"v1","metadata":{},"items":[{"metadata":{"name":"x"}}]}`}},
		{"unusual rows", []string{`{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{},"columnDefinitions":[],"rows":[` +
			`{"cells":null},{},{"cells":[1],"cells":[2]},"not an object",{"cells":[],"object":{"metadata":{}}}]}`,
			`{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{},"columnDefinitions":[],"rows":[{"cells":[3]}]}`}},
		{"empty and null", []string{`{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[]}`, `{"kind":"PodList","apiVersion":"v1","metadata":{},"items":null}`, podListB}},
		{"head after the items", []string{`{"items":[{"metadata":{"name":"late"}}],"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"3"}}`, podListB}},
		{"keys after the items", []string{`{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"3"},"items":[{}],"extra":{"a":[1]}}` + "\n", podListB}},
	} {
		clusters := []string{"a", "b", "c"}[:len(c.bodies)]
		whole := make([]result, len(c.bodies))
		for i, b := range c.bodies {
			whole[i] = ok(clusters[i], b)
		}
		want, wantWarnings, err := mergeJSON(whole, true)
		if err != nil {
			t.Fatalf("%s: merged whole: %v %q", c.name, err, wantWarnings)
		}
		got, warnings, err := streamJSON(t, clusters, c.bodies, true)
		if err != nil || len(warnings) != 0 {
			t.Fatalf("%s: streamed: %v %q", c.name, err, warnings)
		}
		if !jsonEqual(t, got, want) {
			t.Errorf("%s: streamed\n%.2000s\nmerged whole\n%.2000s", c.name, got, want)
		}
	}
}

// A member still answering whose items turn out not to be JSON after the
// list began fails it: the list errors, and no item is left out silently.
func TestStreamedBrokenItemFailsTheList(t *testing.T) {
	broken := `{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[{"metadata":{}},{"a":}]}`
	_, _, err := streamJSON(t, []string{"a", "b"}, []string{broken, podListB}, false)
	if err == nil || !strings.Contains(err.Error(), `upstream cluster "a": its answer is not a JSON list`) {
		t.Errorf("got %v, want the list failed naming a", err)
	}
}

// blockedWriter blocks its first Write until release is closed.
type blockedWriter struct {
	release chan struct{}
	out     bytes.Buffer
}

func (w *blockedWriter) Write(b []byte) (int, error) {
	<-w.release
	return w.out.Write(b)
}

// writeBuffered writes m to w as listEncoder does, through a buffer of
// encodeChunk.
func writeBuffered(m *mergedList, w io.Writer) error {
	bw := bufio.NewWriterSize(w, encodeChunk)
	if err := m.writeTo(bw); err != nil {
		return err
	}
	return bw.Flush()
}

// feed writes body to s in the reverse proxy's 32 KiB writes, counting what
// it wrote in fed, and ends s; done closes when it returns. Past the first
// write it waits for the list to stream s: what a member sends while the
// list waits for the others' heads is held whole.
func feed(s *memberStream, body []byte, fed *atomic.Int64, done chan<- error) {
	defer close(done)
	for i := 0; i < len(body); i += 32 << 10 {
		if i > 0 {
			if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Microsecond, 10*time.Second, true, func(context.Context) (bool, error) {
				s.mu.Lock()
				defer s.mu.Unlock()
				return s.streaming, nil
			}); err != nil {
				s.finish(errBrokeOff)
				done <- errors.New("the list did not stream the member")
				return
			}
		}
		if _, err := s.Write(body[i:min(i+32<<10, len(body))]); err != nil {
			s.finish(errBrokeOff)
			done <- err
			return
		}
		fed.Store(int64(min(i+32<<10, len(body))))
	}
	s.finish(nil)
}

// A member whose items the list writes is held back while the list does not
// read them: the list never holds much more than streamAhead of its answer,
// and gets all of it once it reads again.
func TestStreamedMemberWaitsForTheList(t *testing.T) {
	body := configMapList(20000) // many times streamAhead
	s := newMemberStream("a", nil)
	s.start(context.Background(), func() {})
	var fed atomic.Int64
	done := make(chan error, 1)
	go feed(s, body, &fed, done)
	r := s.head()
	if r.stream == nil {
		t.Fatal("not streamed")
	}
	merged, _, err := merge([]result{r}, true)
	if err != nil {
		t.Fatal(err)
	}
	w := &blockedWriter{release: make(chan struct{})}
	wrote := make(chan error, 1)
	go func() { wrote <- writeBuffered(merged, w) }()
	// Held back, the member cannot write its whole answer; without the
	// bound it would, long before the deadline.
	err = wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 300*time.Millisecond, true, func(context.Context) (bool, error) {
		return fed.Load() == int64(len(body)), nil
	})
	if err == nil {
		t.Fatalf("the member wrote its whole answer (%d bytes) while the list read none of it", len(body))
	}
	s.mu.Lock()
	held := len(s.buf)
	s.mu.Unlock()
	if limit := streamAhead + 2*encodeChunk + 64<<10; held > limit {
		t.Errorf("the list holds %d bytes of the member's answer, want at most %d", held, limit)
	}
	close(w.release)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want, _, err := mergeJSON([]result{ok("a", string(body))}, true)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(w.out.Bytes(), want) {
		t.Errorf("the list differs from the one merged whole: %d bytes, want %d", w.out.Len(), len(want))
	}
}

// A member held back by a list that stopped reading is let go when its
// request ends: the request's goroutine does not wait for ever.
func TestHeldBackMemberEndsWithItsRequest(t *testing.T) {
	body := configMapList(20000)
	ctx, cancel := context.WithCancel(context.Background())
	s := newMemberStream("a", nil)
	s.start(ctx, cancel)
	var fed atomic.Int64
	done := make(chan error, 1)
	go feed(s, body, &fed, done)
	r := s.head()
	if r.stream == nil {
		t.Fatal("not streamed")
	}
	merged, _, err := merge([]result{r}, true)
	if err != nil {
		t.Fatal(err)
	}
	w := &blockedWriter{release: make(chan struct{})}
	wrote := make(chan error, 1)
	go func() { wrote <- writeBuffered(merged, w) }()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return fed.Load() >= streamAhead, nil
	}); err != nil {
		t.Fatalf("the member wrote %d bytes, want at least %d", fed.Load(), streamAhead)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the member's write ended with %v, want %v", err, context.Canceled)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the member's write still waits after its request ended")
	}
	close(w.release)
	if err := <-wrote; err == nil {
		t.Error("the list of a member whose answer broke off ended without an error")
	}
}

// slowFirst answers for member a with the head and the items of a's list
// up to item cut, then what waitFor decides (nil: the rest of the list), and
// for b with b's list at once; bEnded is closed when b's request ended.
type slowFirst struct {
	a, b    []byte
	cut     string
	waitFor func(ctx context.Context) (rest bool)
	bEnded  chan struct{}
}

func (m *slowFirst) serve(w http.ResponseWriter, req *http.Request, name, _ string) {
	w.Header().Set("Content-Type", "application/json")
	if name == "b" {
		defer close(m.bEnded)
		_, _ = w.Write(m.b)
		return
	}
	i := bytes.Index(m.a, []byte(m.cut))
	_, _ = w.Write(m.a[:i])
	if m.waitFor(req.Context()) {
		_, _ = w.Write(m.a[i:])
	}
}

func twoMembers(t *testing.T, m *slowFirst) (*Handler, string) {
	h, _ := newHandler(nil)
	h.Clusters = clusters{uc("a", nil, true), uc("b", nil, true)}
	h.Member = m.serve
	h.ListMemory = NewListMemory(0) // counted, not bounded
	return h, watchServer(t, h).URL + "/apis/gateway.kubewharf.io/v1alpha1/upstreamclusters/*/proxy/api/v1/configmaps"
}

// get starts a GET of a list, compressed or not.
func get(t *testing.T, url string, gzipped bool) (*http.Response, io.Reader) {
	t.Helper()
	// A bound on the whole list: a list that does not stream fails the
	// test, not hangs it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Accept-Encoding", "identity")
	if gzipped {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || (resp.Header.Get("Content-Encoding") == "gzip") != gzipped {
		t.Fatalf("%s, Content-Encoding %q", resp.Status, resp.Header.Get("Content-Encoding"))
	}
	if !gzipped {
		return resp, resp.Body
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, zr
}

// The merged list begins once every member's head is known: its head and
// the first member's items reach the client while that member still
// answers; the second member's answer, which came whole meanwhile, is held
// until the first member's items are written, and follows them.
func TestListStreams(t *testing.T) {
	for _, gzipped := range []bool{false, true} {
		release := make(chan struct{})
		m := &slowFirst{a: configMapList(2000), b: configMapList(10), cut: `{"metadata":{"name":"cm-01000"`, bEnded: make(chan struct{}),
			waitFor: func(ctx context.Context) bool {
				select {
				case <-release:
					return true
				case <-ctx.Done():
					return false
				}
			}}
		h, url := twoMembers(t, m)
		_, body := get(t, url, gzipped)

		// a's first items, while a waits for release: 128 KiB, half of
		// what the gateway writes at once.
		prefix := make([]byte, 128<<10)
		if _, err := io.ReadFull(body, prefix); err != nil {
			t.Fatalf("gzip %v: the list's beginning: %v", gzipped, err)
		}
		if !bytes.HasPrefix(prefix, []byte(`{"apiVersion":"v1","kind":"ConfigMapList","metadata":{"resourceVersion":"`)) ||
			!bytes.Contains(prefix, []byte(`"name":"cm-00000"`)) {
			t.Fatalf("gzip %v: the list begins %.300s", gzipped, prefix)
		}
		select {
		case <-m.bEnded:
		case <-time.After(10 * time.Second):
			t.Fatalf("gzip %v: b's request did not end", gzipped)
		}
		if held := h.ListMemory.Held(); held < int64(len(m.b)) {
			t.Errorf("gzip %v: %d bytes held while a answers, want b's %d at least", gzipped, held, len(m.b))
		}
		close(release)
		rest, err := io.ReadAll(body)
		if err != nil {
			t.Fatalf("gzip %v: %v", gzipped, err)
		}
		var list struct {
			Metadata metav1.ListMeta
			Items    []metav1.PartialObjectMetadata
		}
		if err := json.Unmarshal(append(prefix, rest...), &list); err != nil {
			t.Fatalf("gzip %v: %v", gzipped, err)
		}
		if n := len(list.Items); n != 2010 || list.Items[1999].Name != "cm-01999" || list.Items[1999].Annotations[ClusterAnnotation] != "a" ||
			list.Items[2000].Name != "cm-00000" || list.Items[2000].Annotations[ClusterAnnotation] != "b" {
			t.Errorf("gzip %v: %d items, want a's 2000 then b's 10", gzipped, n)
		}
		if v := composite(t, list.Metadata.ResourceVersion); len(v) != 2 {
			t.Errorf("gzip %v: resourceVersion of %v, want a's and b's", gzipped, v)
		}
		waitFor(t, "the list to give back its memory", func() bool { return h.ListMemory.Held() == 0 })
	}
}

// A member whose answer breaks off after part of the list was sent breaks
// the response off: the client gets an error reading it, never a list
// that looks whole.
func TestListBreaksOffWithAMember(t *testing.T) {
	for _, gzipped := range []bool{false, true} {
		fail := make(chan struct{})
		m := &slowFirst{a: configMapList(2000), b: configMapList(10), cut: `{"metadata":{"name":"cm-01000"`, bEnded: make(chan struct{}),
			waitFor: func(ctx context.Context) bool {
				select {
				case <-fail:
					panic(http.ErrAbortHandler) // as the reverse proxy does when the member's answer breaks off
				case <-ctx.Done():
					return false
				}
			}}
		h, url := twoMembers(t, m)
		_, body := get(t, url, gzipped)
		if _, err := io.ReadFull(body, make([]byte, 128<<10)); err != nil {
			t.Fatalf("gzip %v: the list's beginning: %v", gzipped, err)
		}
		close(fail)
		if rest, err := io.ReadAll(body); err == nil {
			t.Errorf("gzip %v: the list ended without an error (%d more bytes, ending %q)", gzipped, len(rest), rest[max(0, len(rest)-40):])
		}
		waitFor(t, "the list to give back its memory", func() bool { return h.ListMemory.Held() == 0 })
	}
}

// A member whose answer fails after the list began, while none of it was
// sent, fails it with a Status naming the member.
func TestListFailsWithAStatusBeforeItIsSent(t *testing.T) {
	m := &slowFirst{a: []byte(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{},"items":[{"metadata":{}},{"a":}]}`), b: configMapList(10), cut: `]}`,
		bEnded:  make(chan struct{}),
		waitFor: func(ctx context.Context) bool { <-ctx.Done(); return false }, // a still answers when the list ends
	}
	h, url := twoMembers(t, m)
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st metav1.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != http.StatusBadGateway ||
		st.Kind != "Status" || !strings.Contains(st.Message, `upstream cluster "a": its answer is not a JSON list`) {
		t.Errorf("%s %+v (%v): want a 502 Status naming a", resp.Status, st, err)
	}
	waitFor(t, "the list to give back its memory", func() bool { return h.ListMemory.Held() == 0 })
}
