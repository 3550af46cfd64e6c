package fanout

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// podList is a member's list of one pod whose name pads it to about size
// bytes.
func podList(name string, size int) []byte {
	return []byte(fmt.Sprintf(`{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[{"metadata":{"name":"p-%s-%s"}}]}`,
		name, strings.Repeat("x", max(size-100, 0))))
}

// sized answers each member's list with a pod list of size bytes, in 64-byte
// writes as a reverse proxy copies, and stops at the first write refused.
func sized(size int) MemberFunc {
	return func(w http.ResponseWriter, _ *http.Request, name, _ string) {
		w.Header().Set("Content-Type", "application/json")
		for b := podList(name, size); len(b) > 0; {
			n := min(64, len(b))
			if _, err := w.Write(b[:n]); err != nil {
				return
			}
			b = b[n:]
		}
	}
}

func statusOf(t *testing.T, rec *httptest.ResponseRecorder) metav1.Status {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Kind != "Status" {
		t.Fatalf("%d %s: not a Status", rec.Code, rec.Body)
	}
	return st
}

// lastFirst is sized, except that member a, the first of the list, answers
// only once every other member's request has ended (or its own is
// cancelled): the others' answers are held until a's head is known.
func lastFirst(size, others int) MemberFunc {
	var ended sync.WaitGroup
	ended.Add(others)
	return func(w http.ResponseWriter, req *http.Request, name, path string) {
		if name != "a" {
			defer ended.Done()
			sized(size)(w, req, name, path)
			return
		}
		done := make(chan struct{})
		go func() { ended.Wait(); close(done) }()
		select {
		case <-done:
			sized(size)(w, req, name, path)
		case <-req.Context().Done():
		}
	}
}

// A list whose held answers are larger than the bound on their own fails
// with 413 telling the client to page, and gives back what it held; paged,
// the same members are served.
func TestListMemoryTooLarge(t *testing.T) {
	h, _ := newHandler(nil)
	h.Member = lastFirst(1000, 2)
	h.ListMemory = NewListMemory(1500) // b and c answer 2,000 bytes while a's head is awaited
	rec := do(h, "*", "/api/v1/pods", "", nil)
	st := statusOf(t, rec)
	if rec.Code != http.StatusRequestEntityTooLarge || st.Reason != metav1.StatusReasonRequestEntityTooLarge ||
		!strings.Contains(st.Message, "1500") || !strings.Contains(st.Message, "--fan-out-list-memory") || !strings.Contains(st.Message, "limit") {
		t.Errorf("%d %s: want a 413 naming the bound and the flag, and telling to page", rec.Code, rec.Body)
	}
	if w := rec.Header().Values("Warning"); len(w) != 0 {
		t.Errorf("warnings %q: the members' failures are the bound's doing, not theirs", w)
	}
	if tooLarge, busy := h.ListMemory.Refused(); tooLarge != 1 || busy != 0 {
		t.Errorf("refused %d too large, %d busy; want 1, 0", tooLarge, busy)
	}
	if held := h.ListMemory.Held(); held != 0 {
		t.Errorf("%d bytes held after the list", held)
	}

	// A page that alone is larger: the client is told to ask for fewer items.
	h.Member = sized(1000)
	rec = do(h, "*", "/api/v1/pods", "limit=3", nil)
	if st := statusOf(t, rec); rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(st.Message, "a lower limit") {
		t.Errorf("a page of 3,000 bytes with a bound of 1,500: %d %s", rec.Code, rec.Body)
	}

	// Paged, a page holds one member's answer at a time.
	for _, q := range []string{"limit=1", "limit=1&continue=" + url.QueryEscape((&continueToken{Cluster: "b", Versions: map[string]string{"a": "1"}}).encode())} {
		rec = do(h, "*", "/api/v1/pods", q, nil)
		if rec.Code != http.StatusOK || len(itemClusters(t, rec)) != 1 {
			t.Errorf("?%s: %d %.200s", q, rec.Code, rec.Body)
		}
	}
	if held := h.ListMemory.Held(); held != 0 {
		t.Errorf("%d bytes still held after the pages", held)
	}
}

// A list that fits the bound alone, while other lists hold the memory, fails
// with 429 and Retry-After; it passes once they are done.
func TestListMemoryBusy(t *testing.T) {
	h, _ := newHandler(nil)
	h.Member = lastFirst(1000, 2)
	h.ListMemory = NewListMemory(5000)
	other := h.ListMemory.newHold(func() {}, false)
	if err := other.take(3000); err != nil {
		t.Fatal(err)
	}
	rec := do(h, "*", "/api/v1/pods", "", nil) // b and c fill the bound, a goes over it
	st := statusOf(t, rec)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" || !strings.Contains(st.Message, "other fan-out lists") {
		t.Errorf("%d Retry-After %q %s: want a 429 to retry", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	if held := h.ListMemory.Held(); held != 3000 {
		t.Errorf("%d bytes held, want the other list's 3000", held)
	}
	other.release()
	h.Member = lastFirst(1000, 2)
	rec = do(h, "*", "/api/v1/pods", "", nil)
	if got := strings.Join(itemClusters(t, rec), ","); got != "a,b,c" {
		t.Errorf("after the other list: items of %s", got)
	}
	if tooLarge, busy := h.ListMemory.Refused(); tooLarge != 0 || busy != 1 {
		t.Errorf("refused %d too large, %d busy; want 0, 1", tooLarge, busy)
	}
	if held := h.ListMemory.Held(); held != 0 {
		t.Errorf("%d bytes still held", held)
	}
}

// A list streams what its members send as it arrives, and holds only what
// it has not written yet: member a sends ten times the bound, a part at a
// time, each once the list holds less than half the bound.
func TestListMemoryHoldsWhatIsNotWritten(t *testing.T) {
	const bound, part = 10000, 1000
	h, _ := newHandler(nil)
	h.ListMemory = NewListMemory(bound)
	h.Member = func(w http.ResponseWriter, req *http.Request, name, path string) {
		if name != "a" {
			sized(100)(w, req, name, path)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[`))
		for i := range 10 * bound / part {
			if err := wait.PollUntilContextTimeout(req.Context(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				return h.ListMemory.Held() < bound/2, nil
			}); err != nil {
				t.Errorf("part %d: the list held %d bytes: %v", i, h.ListMemory.Held(), err)
				return
			}
			item := fmt.Sprintf(`{"metadata":{"name":"p-%05d"},"x":"%s"}`, i, strings.Repeat("x", part-50))
			if i > 0 {
				item = "," + item
			}
			if _, err := w.Write([]byte(item)); err != nil {
				return
			}
		}
		_, _ = w.Write([]byte("]}\n"))
	}
	rec := do(h, "*", "/api/v1/pods", "", nil)
	got := itemClusters(t, rec)
	if len(got) != 10*bound/part+2 || got[0] != "a" || got[len(got)-1] != "c" {
		t.Errorf("%d: %d items, want %d of a, then b's and c's", rec.Code, len(got), 10*bound/part)
	}
	if held := h.ListMemory.Held(); held != 0 {
		t.Errorf("%d bytes still held", held)
	}
}

// Once a list is over the bound, its other member requests are cancelled,
// not waited for.
func TestListMemoryCancelsTheOtherMembers(t *testing.T) {
	h, _ := newHandler(nil)
	h.ListMemory = NewListMemory(500)
	h.MemberTimeout = time.Minute
	cancelled := make(chan error, 2)
	h.Member = func(w http.ResponseWriter, req *http.Request, name, path string) {
		if name == "b" {
			sized(1000)(w, req, name, path)
			return
		}
		select { // a and c answer slowly
		case <-req.Context().Done():
			cancelled <- req.Context().Err()
		case <-time.After(30 * time.Second):
			cancelled <- nil
		}
	}
	rec := do(h, "*", "/api/v1/pods", "", nil)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("%d %s", rec.Code, rec.Body)
	}
	for range 2 {
		if err := <-cancelled; err == nil {
			t.Error("a slow member's request went on after the list failed")
		}
	}
}

// Through a real reverse proxy in a server's goroutine, as the gateway serves
// a member, the refused write aborts the member's response (the reverse
// proxy panics with http.ErrAbortHandler, which the fan-out recovers): the
// copy stops, and nothing is held after the list.
func TestListMemoryAbortsTheReverseProxy(t *testing.T) {
	const size = 1 << 20
	member := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(podList(req.URL.Query().Get("name"), size))
	}))
	defer member.Close()
	target, _ := url.Parse(member.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ErrorLog = log.New(io.Discard, "", 0) // the other members' cancellations
	h, _ := newHandler(nil)
	h.ListMemory = NewListMemory(size / 2)
	h.Parallel = 1
	h.Member = func(w http.ResponseWriter, req *http.Request, name, _ string) {
		req.URL.RawQuery = "name=" + name
		rp.ServeHTTP(w, req)
	}
	srv := httptest.NewServer(genericapifilters.WithWarningRecorder(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		h.Serve(w, req.WithContext(genericapirequest.WithUser(req.Context(), &user.DefaultInfo{Name: "alice"})), "*", "/api/v1/pods")
	})))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("%s, want 413", resp.Status)
	}
	if held := h.ListMemory.Held(); held != 0 {
		t.Errorf("%d bytes held after the list", held)
	}
}

// What a list gives back (answers a page asked for and does not use) is
// free for others at once, never more than it holds.
func TestListMemoryGive(t *testing.T) {
	m := NewListMemory(1000)
	h := m.newHold(func() {}, true)
	if err := h.take(600); err != nil {
		t.Fatal(err)
	}
	h.give(400)
	if m.Held() != 200 {
		t.Errorf("%d bytes held after giving 400 of 600, want 200", m.Held())
	}
	other := m.newHold(func() {}, false)
	if err := other.take(800); err != nil {
		t.Errorf("another list could not take what was given back: %v", err)
	}
	h.give(1000)
	if m.Held() != 800 {
		t.Errorf("%d bytes held after giving back more than was held, want the other list's 800", m.Held())
	}
}

// The places found in a list's items count against the bound too: a member
// that answers many tiny items (each a place for the annotation) makes them
// larger than its answer.
func TestListMemoryCountsSplices(t *testing.T) {
	tiny := []byte(`{"kind":"XList","apiVersion":"v1","items":[{}` + strings.Repeat(`,{}`, 9999) + `]}`) // 30 KB
	h, _ := newHandler(nil)
	h.Member = func(w http.ResponseWriter, _ *http.Request, _, _ string) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(tiny)
	}
	// Paged, as a list whose members' answers are held whole.
	h.ListMemory = NewListMemory(int64(3*len(tiny) + 10000)) // the three answers, but not their places
	rec := do(h, "*", "/api/v1/pods", "limit=100000", nil)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("%d %.200s: want a 413", rec.Code, rec.Body)
	}
	if st := statusOf(t, rec); !strings.Contains(st.Message, "--fan-out-list-memory") {
		t.Errorf("%s: want the bound's flag named", st.Message)
	}
	if held := h.ListMemory.Held(); held != 0 {
		t.Errorf("%d bytes still held after the list", held)
	}

	// With room for them, the list is served, and all is given back.
	h.ListMemory = NewListMemory(int64(3 * (len(tiny) + 2*10000*spliceSize)))
	if rec := do(h, "*", "/api/v1/pods", "limit=100000", nil); rec.Code != http.StatusOK {
		t.Fatalf("%d %.200s", rec.Code, rec.Body)
	}
	if held := h.ListMemory.Held(); held != 0 {
		t.Errorf("%d bytes still held after the list", held)
	}
}
