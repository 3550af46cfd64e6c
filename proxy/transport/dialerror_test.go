package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"testing"

	proxyutil "k8s.io/apimachinery/pkg/util/proxy"
)

// An upgrade's failed dial keeps its type through UpgradeAwareHandler, which
// reports it as text: Restore puts the dial error back behind that text.
func TestKeepDialError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	tr, err := New(Config{BearerToken: token, ProxyURL: &url.URL{Scheme: "http", Host: closed}})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse("https://192.0.2.10:6443/api/v1/namespaces/default/pods/p/exec")

	ctx, kept := KeepDialError(context.Background())
	_, dialErr := proxyutil.DialURL(ctx, u, tr.Upgrade)
	if dialErr == nil {
		t.Fatal("dial through a closed proxy port succeeded")
	}
	// As UpgradeAwareHandler reports it.
	reported := fmt.Errorf("error dialing backend: %v", dialErr)
	if IsProxyError(reported) {
		t.Fatal("the reported text is already typed: the test proves nothing")
	}
	restored := kept.Restore(reported)
	if !IsProxyError(restored) {
		t.Errorf("restored error %v is not a ProxyError", restored)
	}
	if restored.Error() != reported.Error() {
		t.Errorf("restored message %q, want %q", restored, reported)
	}
	var opErr *net.OpError
	if !errors.As(restored, &opErr) || opErr.Op != "dial" {
		t.Errorf("restored error %v does not wrap the proxy's dial error", restored)
	}

	// Without a failed dial, errors are left as they are.
	_, idle := KeepDialError(context.Background())
	if got := idle.Restore(reported); got != reported {
		t.Errorf("Restore without a failed dial = %v, want the error unchanged", got)
	}
	if got := kept.Restore(dialErr); got != dialErr {
		t.Errorf("Restore of the dial error itself = %v, want it unchanged", got)
	}
}
