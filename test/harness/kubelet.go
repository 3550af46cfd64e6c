package harness

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kubewharf/kube-gateway/test/kubelet"
)

// StandInKubeletCommand is the hidden subcommand that runs the stand-in
// kubelet as its own process (Config.Detach). A program that starts a
// detached environment must dispatch it to StandInKubeletMain.
const StandInKubeletCommand = "stand-in-kubelet"

// StandInKubeletMain runs test/kubelet until SIGTERM or SIGINT. args are the
// arguments after the subcommand: --cert, --key, --client-ca and
// --addr-file (where it writes host:port once it listens).
func StandInKubeletMain(args []string) error {
	fs := flag.NewFlagSet(StandInKubeletCommand, flag.ContinueOnError)
	cert := fs.String("cert", "", "serving certificate (PEM)")
	key := fs.String("key", "", "serving key (PEM)")
	clientCA := fs.String("client-ca", "", "CA of the clients (the apiservers' kubelet client certs)")
	addrFile := fs.String("addr-file", "", "file to write the listening host:port to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cert == "" || *key == "" || *clientCA == "" || *addrFile == "" {
		return errors.New("--cert, --key, --client-ca and --addr-file are required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	srv, err := kubelet.Start(ctx, kubelet.Config{CertFile: *cert, KeyFile: *key, ClientCAFile: *clientCA})
	if err != nil {
		return err
	}
	tmp := *addrFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(srv.Addr()+"\n"), 0o644); err != nil {
		srv.Close()
		return err
	}
	if err := os.Rename(tmp, *addrFile); err != nil {
		srv.Close()
		return err
	}
	fmt.Printf("stand-in kubelet listening on %s\n", srv.Addr())
	<-ctx.Done()
	fmt.Println("stand-in kubelet stopping")
	return srv.Close()
}

func (e *Env) startKubelet(ctx context.Context) error {
	cfg := kubelet.Config{
		CertFile:     e.pki.kubeletServing.CertFile,
		KeyFile:      e.pki.kubeletServing.KeyFile,
		ClientCAFile: e.pki.kubeletClientCA.CertFile,
	}
	if !e.cfg.Detach {
		// The server lives until Stop, not until ctx ends.
		srv, err := kubelet.Start(context.WithoutCancel(ctx), cfg)
		if err != nil {
			return fmt.Errorf("stand-in kubelet: %w", err)
		}
		e.Kubelet = &StandInKubelet{Addr: srv.Addr(), Port: srv.Port(), close: srv.Close}
		return nil
	}

	// Detached: a copy of this executable (go run deletes its own binary
	// when it exits) runs the hidden subcommand.
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	binCopy := filepath.Join(e.WorkDir, "bin", "stand-in-kubelet")
	if err := copyExecutable(exe, binCopy); err != nil {
		return fmt.Errorf("stand-in kubelet: copy %s: %w", exe, err)
	}
	addrFile := filepath.Join(e.WorkDir, "stand-in-kubelet.addr")
	_ = os.Remove(addrFile)
	p := e.newProcess("stand-in-kubelet")
	p.Args = []string{binCopy, StandInKubeletCommand,
		"--cert", cfg.CertFile, "--key", cfg.KeyFile, "--client-ca", cfg.ClientCAFile, "--addr-file", addrFile}
	p.timeout = 30 * time.Second
	k := &StandInKubelet{Process: p}
	p.probe = func(ctx context.Context) error {
		data, err := os.ReadFile(addrFile)
		if err != nil {
			return err
		}
		addr := strings.TrimSpace(string(data))
		d := net.Dialer{Timeout: 2 * time.Second}
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		conn.Close()
		_, port, _ := net.SplitHostPort(addr)
		k.Addr = addr
		k.Port, _ = strconv.Atoi(port)
		return nil
	}
	e.Kubelet = k
	return e.startTracked(ctx, p, nil)
}

// copyExecutable copies src to dst (through dst.tmp and a rename) for dst to
// be executed. A process forked while the copy is open for writing would hold
// that descriptor until its own exec, and exec of dst would then fail with
// ETXTBSY (golang/go#22315) if other goroutines start processes meanwhile.
// Holding syscall.ForkLock for reading from open to close keeps every fork of
// this process out of that window (a hard link would not need it, but does
// not work across file systems, where go run's binary usually is).
func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp := dst + ".tmp"
	if err := writeUnforked(tmp, in); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// writeUnforked writes r to path (mode 0755) while no fork can happen.
func writeUnforked(path string, r io.Reader) error {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, r); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
