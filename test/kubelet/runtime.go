package kubelet

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// pod is the in-process "container runtime" of the stand-in, for one request's pod.
// It implements the streaming library's Executor, Attacher and PortForwarder with a
// few canned behaviours, so that tests can assert on exact bytes and exit codes and
// nothing ever runs on the host.
type pod struct {
	server          *Server
	namespace, name string
}

var (
	_ remotecommand.Executor = pod{}
	_ remotecommand.Attacher = pod{}
)

// ExecInContainer runs one of the canned commands:
//
//	echo ARGS...    prints ARGS joined by spaces and a newline; exit 0
//	cat             copies stdin to stdout until stdin closes; exit 0
//	sh -c "exit N"  exits with code N
//	env             prints POD=<namespace>/<pod> and CONTAINER=<container>
//	anything else   prints "stand-in kubelet: unknown command" on stderr; exit 127
//
// A non-zero exit is returned as a k8s.io/utils/exec.ExitError, which ServeExec turns
// into the NonZeroExitCode status that clients report as an exit code (client-go's
// exec.CodeExitError). Copy errors mean the client went away; nobody is left to tell.
func (p pod) ExecInContainer(_ context.Context, _, _ string, container string, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, _ <-chan remotecommand.TerminalSize, _ time.Duration) error {
	p.server.record(Request{Kind: "exec", Namespace: p.namespace, Pod: p.name, Container: container, Command: slices.Clone(cmd)})
	stdout, stderr := orDiscard(out), orDiscard(errOut)
	if tty {
		stderr = stdout // a terminal has a single output stream; ServeExec drops stderr
	}
	switch {
	case len(cmd) > 0 && cmd[0] == "echo":
		_, _ = fmt.Fprintln(stdout, strings.Join(cmd[1:], " "))
		return nil
	case slices.Equal(cmd, []string{"cat"}):
		if in != nil {
			_, _ = io.Copy(stdout, in)
		}
		return nil
	case slices.Equal(cmd, []string{"env"}):
		_, _ = fmt.Fprintf(stdout, "POD=%s/%s\nCONTAINER=%s\n", p.namespace, p.name, container)
		return nil
	}
	if code, ok := shellExit(cmd); ok {
		return exitCode(code)
	}
	_, _ = fmt.Fprintln(stderr, "stand-in kubelet: unknown command")
	return exitCode(127)
}

// shellExit recognises `sh -c "exit N"` and returns N.
func shellExit(cmd []string) (int, bool) {
	if len(cmd) != 3 || cmd[0] != "sh" || cmd[1] != "-c" {
		return 0, false
	}
	words := strings.Fields(cmd[2])
	if len(words) != 2 || words[0] != "exit" {
		return 0, false
	}
	code, err := strconv.Atoi(words[1])
	if err != nil || code < 0 || code > 255 {
		return 0, false
	}
	return code, true
}

func exitCode(code int) error {
	if code == 0 {
		return nil
	}
	return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", code), Code: code}
}

// AttachContainer greets with "attached to <namespace>/<pod>/<container>" and then
// echoes stdin to stdout until stdin closes, like a container running `cat`.
func (p pod) AttachContainer(_ context.Context, _, _ string, container string, in io.Reader, out, _ io.WriteCloser, _ bool, _ <-chan remotecommand.TerminalSize) error {
	p.server.record(Request{Kind: "attach", Namespace: p.namespace, Pod: p.name, Container: container})
	stdout := orDiscard(out)
	_, _ = fmt.Fprintf(stdout, "attached to %s/%s/%s\n", p.namespace, p.name, container)
	if in != nil {
		_, _ = io.Copy(stdout, in)
	}
	return nil
}

// PortForward makes every port of the pod an echo server: each forwarded connection
// gets back every byte it sends, until it closes its side. The streaming library calls
// this from goroutines that can outlive the HTTP handler, hence the work accounting.
func (p pod) PortForward(_ context.Context, _, _ string, port int32, stream io.ReadWriteCloser) error {
	if !p.server.begin() {
		return fmt.Errorf("stand-in kubelet is shutting down")
	}
	defer p.server.work.Done()
	p.server.record(Request{Kind: "portforward", Namespace: p.namespace, Pod: p.name, Port: port})
	_, _ = io.Copy(stream, stream) // an error means the client went away
	return nil
}

// orDiscard stands in for streams the client did not ask for.
func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
