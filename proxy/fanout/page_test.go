package fanout

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
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
			Continue           string
			RemainingItemCount *int64
		}
		Items []struct{ Metadata struct{ Name string } }
	}
	for limit, want := range map[int]string{2: "a0,a1 | a2,c0 | c1", 3: "a0,a1,a2 | c0,c1"} {
		var pages []string
		cont := ""
		for range 10 {
			q := "limit=" + strconv.Itoa(limit)
			if cont != "" {
				q += "&continue=" + cont
			}
			rec := do(h, "*", "/api/v1/pods", q, nil)
			if rec.Code != http.StatusOK {
				t.Fatalf("%s: %d %s", q, rec.Code, rec.Body)
			}
			last.Metadata.Continue = ""
			if err := json.Unmarshal(rec.Body.Bytes(), &last); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, i := range last.Items {
				names = append(names, i.Metadata.Name)
			}
			pages = append(pages, strings.Join(names, ","))
			if cont = last.Metadata.Continue; cont == "" {
				break
			}
		}
		if got := strings.Join(pages, " | "); got != want {
			t.Errorf("limit %d: pages %s, want %s", limit, got, want)
		}
		if got := composite(t, last.Metadata.ResourceVersion); len(got) != 3 || got["a"] != "10a" || got["c"] != "10c" {
			t.Errorf("limit %d: last page's resourceVersion names %v, want a, b and c", limit, got)
		}
	}
	// A page that ends inside the last member tells what is left of it.
	rec := do(h, "*", "/api/v1/pods", "limit=4", nil)
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
