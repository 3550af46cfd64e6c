package fanout

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// pagedMembers serves each cluster's items in pages of the asked limit, with
// its own continue tokens (the next index), at resourceVersion "10<cluster>".
type pagedMembers map[string]int

func (p pagedMembers) serve(w http.ResponseWriter, req *http.Request, name, path string) {
	q := req.URL.Query()
	if q.Get("continue") == "expired" {
		w.WriteHeader(http.StatusGone)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","code":410,"reason":"Expired","message":"the provided continue parameter is too old"}`))
		return
	}
	start, _ := strconv.Atoi(q.Get("continue"))
	limit, _ := strconv.Atoi(q.Get("limit"))
	end := p[name]
	if limit > 0 && start+limit < end {
		end = start + limit
	}
	var items []string
	for i := start; i < end; i++ {
		items = append(items, fmt.Sprintf(`{"metadata":{"name":"%s%d"}}`, name, i))
	}
	md := `"resourceVersion":"10` + name + `"`
	if end < p[name] {
		md += fmt.Sprintf(`,"continue":"%d","remainingItemCount":%d`, end, p[name]-end)
	}
	_, _ = w.Write([]byte(`{"kind":"PodList","apiVersion":"v1","metadata":{` + md + `},"items":[` + strings.Join(items, ",") + `]}`))
}

// limit pages through the members in name order; the last page's
// resourceVersion names every member.
func TestPaging(t *testing.T) {
	h, _ := newHandler(nil)
	h.Member = pagedMembers{"a": 3, "b": 0, "c": 2}.serve
	var last struct {
		Metadata struct {
			ResourceVersion    string
			RemainingItemCount *int64
		}
	}
	for limit, want := range map[int]string{2: "a0,a1 | a2,c0 | c1", 3: "a0,a1,a2 | c0,c1"} {
		pages, lastPage, err := listPages(h, limit)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(pages, " | "); got != want {
			t.Errorf("limit %d: pages %s, want %s", limit, got, want)
		}
		if err := json.Unmarshal(lastPage, &last); err != nil {
			t.Fatal(err)
		}
		if got := composite(t, last.Metadata.ResourceVersion); len(got) != 3 || got["a"] != "10a" || got["c"] != "10c" {
			t.Errorf("limit %d: last page's resourceVersion names %v, want a, b and c", limit, got)
		}
	}
	// A page that ends inside the last member tells what is left of it.
	rec := do(h, "*", "/api/v1/pods", "limit=4", nil)
	last.Metadata.RemainingItemCount = nil
	_ = json.Unmarshal(rec.Body.Bytes(), &last)
	if last.Metadata.RemainingItemCount == nil || *last.Metadata.RemainingItemCount != 1 {
		t.Errorf("remainingItemCount %v, want 1 (c1)", last.Metadata.RemainingItemCount)
	}
}

func TestPagingTokens(t *testing.T) {
	h, _ := newHandler(nil)
	h.Member = pagedMembers{"a": 3, "b": 0, "c": 2}.serve
	if rec := do(h, "*", "/api/v1/pods", "limit=1&continue=abc", nil); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "continue") {
		t.Errorf("a foreign continue token: %d %s", rec.Code, rec.Body)
	}
	expired := (&continueToken{Cluster: "a", Continue: "expired"}).encode()
	if rec := do(h, "*", "/api/v1/pods", "limit=1&continue="+expired, nil); rec.Code != http.StatusGone {
		t.Errorf("a member's expired token: %d %s, want 410", rec.Code, rec.Body)
	}
	// A cluster gone since the last page: the next one by name goes on.
	gone := (&continueToken{Cluster: "bb", Continue: "1"}).encode()
	rec := do(h, "*", "/api/v1/pods", "limit=5&continue="+gone, nil)
	if got := strings.Join(itemClusters(t, rec), ","); got != "c,c" {
		t.Errorf("after a vanished cluster: items of %s, want c,c", got)
	}
}

// pages lists every page of the fan-out list with limit and returns the item
// names of each.
func pages(t *testing.T, h *Handler, limit int) []string {
	t.Helper()
	out, _, err := listPages(h, limit)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// listPages lists every page of the fan-out list with limit, as client-go's
// pager does, and returns the item names of each and the last page's body.
func listPages(h *Handler, limit int) (names []string, last []byte, err error) {
	cont := ""
	for range 100 {
		q := "limit=" + strconv.Itoa(limit)
		if cont != "" {
			q += "&continue=" + cont
		}
		rec := do(h, "*", "/api/v1/pods", q, nil)
		if rec.Code != http.StatusOK {
			return nil, nil, fmt.Errorf("%s: %d %s", q, rec.Code, rec.Body)
		}
		var page struct {
			Metadata struct{ Continue string }
			Items    []struct{ Metadata struct{ Name string } }
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil {
			return nil, nil, err
		}
		var items []string
		for _, i := range page.Items {
			items = append(items, i.Metadata.Name)
		}
		names = append(names, strings.Join(items, ","))
		if cont = page.Metadata.Continue; cont == "" {
			return names, rec.Body.Bytes(), nil
		}
	}
	return nil, nil, fmt.Errorf("limit %d: more than 100 pages", limit)
}

// Members asked a window at a time give the pages one member at a time
// gives, whatever the limit and however the items are spread; a member asked
// for more than the page has left is asked again for what is left.
func TestPagingWindows(t *testing.T) {
	sizes := pagedMembers{"a": 3, "b": 0, "c": 2, "d": 1, "e": 7, "f": 0, "g": 4, "h": 1, "i": 1, "j": 2}
	h, _ := newHandler(nil)
	h.Clusters = clusters{}
	for name := range sizes {
		h.Clusters = append(h.Clusters.(clusters), uc(name, nil, true))
	}
	h.Member = sizes.serve
	for limit := 1; limit <= 22; limit++ {
		h.Parallel = 1 // one member at a time: the reference
		want := pages(t, h, limit)
		for _, parallel := range []int{2, 3, 8} {
			h.Parallel = parallel
			if got := pages(t, h, limit); strings.Join(got, " | ") != strings.Join(want, " | ") {
				t.Errorf("limit %d, parallel %d: pages\n%s\nwant\n%s", limit, parallel, strings.Join(got, " | "), strings.Join(want, " | "))
			}
		}
	}
}

// smallMembers is a Handler over 100 members m000..m099 of 2 items each,
// asking 16 at a time, with the members' sizes.
func smallMembers() (*Handler, pagedMembers) {
	sizes := pagedMembers{}
	h, _ := newHandler(nil)
	h.Clusters = clusters{}
	for i := range 100 {
		name := fmt.Sprintf("m%03d", i)
		sizes[name] = 2
		h.Clusters = append(h.Clusters.(clusters), uc(name, nil, true))
	}
	h.Parallel = 16
	return h, sizes
}

// Over many small members, a page asks them in parallel windows, not one
// after the other: after the first member's answer (2 items, 48 left), the
// next window asks 16 members (Parallel) before any of them answered.
func TestPagingAsksSmallMembersInParallel(t *testing.T) {
	h, sizes := smallMembers()
	// Every member but the first answers only once released.
	arrived, release := make(chan string, 100), make(chan struct{})
	var requests atomic.Int32
	h.Member = func(w http.ResponseWriter, req *http.Request, name, path string) {
		requests.Add(1)
		arrived <- name
		if name != "m000" {
			<-release
		}
		sizes.serve(w, req, name, path)
	}
	done := make(chan []string)
	go func() { // 25 members a page
		got, _, err := listPages(h, 50)
		if err != nil {
			t.Error(err)
		}
		done <- got
	}()
	wait := func() string {
		select {
		case name := <-arrived:
			return name
		case <-time.After(10 * time.Second):
			t.Fatal("no member asked: the members of a window are not asked at once")
			return ""
		}
	}
	if name := wait(); name != "m000" {
		t.Fatalf("first asked %s", name)
	}
	for range 16 {
		wait()
	}
	close(release)
	got := <-done
	if len(got) != 4 || strings.Count(strings.Join(got, ","), ",") != 199 {
		t.Fatalf("pages %q, want 4 of 50 items", got)
	}
	if n := requests.Load(); n > 100+4*16 {
		t.Errorf("%d member requests for 100 members in 4 pages: windows ask too far past the pages", n)
	}
}

// The next page's first window is as many members as the pages before say
// fit, not one: its continue token carries the items per member so far.
func TestPagingCarriesTheWindow(t *testing.T) {
	h, sizes := smallMembers()
	h.Member = sizes.serve
	rec := do(h, "*", "/api/v1/pods", "limit=50", nil)
	var first struct{ Metadata struct{ Continue string } }
	if err := json.Unmarshal(rec.Body.Bytes(), &first); err != nil || first.Metadata.Continue == "" {
		t.Fatalf("first page: %v %s", err, rec.Body)
	}
	// Every member answers only once released.
	arrived, release := make(chan string, 100), make(chan struct{})
	h.Member = func(w http.ResponseWriter, req *http.Request, name, path string) {
		arrived <- name
		<-release
		sizes.serve(w, req, name, path)
	}
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- do(h, "*", "/api/v1/pods", "limit=50&continue="+first.Metadata.Continue, nil) }()
	for range 16 {
		select {
		case <-arrived:
		case <-time.After(10 * time.Second):
			close(release)
			<-done
			t.Fatal("the second page asked fewer than 16 members at first")
		}
	}
	close(release)
	if got := itemClusters(t, <-done); len(got) != 50 || got[0] != "m025" {
		t.Errorf("second page: %d items from %v on, want 50 from m025", len(got), got[:min(1, len(got))])
	}
}

func TestNextWindow(t *testing.T) {
	for _, c := range []struct {
		window                   int
		remaining                int64
		counted, items, parallel int
		want                     int
	}{
		{1, 0, 0, 0, 8, 8},     // no limit: all it may
		{1, 10, 1, 0, 8, 2},    // empty members so far: doubles
		{4, 10, 3, 0, 8, 8},    // up to parallel
		{1, 48, 1, 2, 16, 16},  // 24 members fit
		{1, 5, 2, 4, 8, 3},     // 2 items a member: 3 for 5
		{1, 200, 1, 300, 8, 1}, // large members: one at a time
		{8, 1, 10, 10, 8, 1},   // one item left
	} {
		if got := nextWindow(c.window, c.remaining, c.counted, c.items, c.parallel); got != c.want {
			t.Errorf("nextWindow(%d, %d, %d, %d, %d) = %d, want %d", c.window, c.remaining, c.counted, c.items, c.parallel, got, c.want)
		}
	}
}
