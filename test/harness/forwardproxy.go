package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// ForwardProxy is a forward proxy on loopback that a test puts between the
// gateway and a member: tinyproxy (HTTP CONNECT) or Dante (SOCKS5), from the
// distribution's packages (.ci/run installs them). Stop it with Process.Stop
// and bring it back on the same port with Process.Restart.
type ForwardProxy struct {
	Process *Process
	// URL is what spec.clientConfig.proxyURL takes, e.g. http://127.0.0.1:PORT.
	URL  string
	Port int
}

// StartTinyproxy starts tinyproxy on a free loopback port, with Basic
// authentication when user is set. It logs every CONNECT to its log
// (Process.LogFile).
func (e *Env) StartTinyproxy(ctx context.Context, name, user, password string) (*ForwardProxy, error) {
	bin, err := exec.LookPath("tinyproxy")
	if err != nil {
		return nil, fmt.Errorf("tinyproxy is needed: install the tinyproxy package (make test-deps): %w", err)
	}
	return e.startForwardProxy(ctx, name, "http", func(port int) (string, []string) {
		conf := fmt.Sprintf("Port %d\nListen 127.0.0.1\nAllow 127.0.0.1\nTimeout 600\nMaxClients 100\nLogLevel Connect\n", port)
		if user != "" {
			conf += fmt.Sprintf("BasicAuth %s %s\n", user, password)
		}
		// -d: foreground, the log on stdout.
		return conf, []string{bin, "-d", "-c"}
	})
}

// StartDante starts Dante's SOCKS5 server on a free loopback port, without
// authentication (Dante's username method checks system accounts), relaying to
// loopback only. It logs every session to its log (Process.LogFile).
func (e *Env) StartDante(ctx context.Context, name string) (*ForwardProxy, error) {
	bin, err := exec.LookPath("danted")
	if err != nil {
		return nil, fmt.Errorf("danted is needed: install the dante-server package (make test-deps): %w", err)
	}
	return e.startForwardProxy(ctx, name, "socks5", func(port int) (string, []string) {
		conf := fmt.Sprintf(`logoutput: stderr
internal: 127.0.0.1 port = %d
external: 127.0.0.1
clientmethod: none
socksmethod: none
user.privileged: root
user.unprivileged: nobody
client pass {
	from: 127.0.0.0/8 to: 0.0.0.0/0
	log: error
}
socks pass {
	from: 127.0.0.0/8 to: 127.0.0.0/8
	command: connect
	log: connect disconnect error
}
`, port)
		return conf, []string{bin, "-N", "1", "-f"}
	})
}

// startForwardProxy writes the configuration render returns for a free port
// to <WorkDir>/<name>/<name>.conf and starts argv plus that path; it is ready
// when the port accepts connections.
func (e *Env) startForwardProxy(ctx context.Context, name, scheme string, render func(port int) (conf string, argv []string)) (*ForwardProxy, error) {
	dir := filepath.Join(e.WorkDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	confPath := filepath.Join(dir, name+".conf")
	fp := &ForwardProxy{}
	var writeErr error
	args := func() []string {
		port, err := freePort()
		if err != nil {
			writeErr = err
			return []string{"/bin/false"}
		}
		conf, argv := render(port)
		if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
			writeErr = err
		}
		fp.Port = port
		fp.URL = scheme + "://127.0.0.1:" + strconv.Itoa(port)
		return append(argv, confPath)
	}
	p, err := e.StartExtra(ctx, ExtraProcess{
		Name: name,
		Args: args,
		Ready: func(ctx context.Context) error {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", "127.0.0.1:"+strconv.Itoa(fp.Port))
			if err != nil {
				return err
			}
			return c.Close()
		},
		Timeout: 30 * time.Second,
	})
	fp.Process = p
	if writeErr != nil {
		return fp, writeErr
	}
	return fp, err
}
