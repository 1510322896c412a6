package kubecp

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Restart backoff of a child that exits on its own, like the kubelet's
// for a static pod: doubling from restartBackoffMin up to restartBackoffMax,
// back to the minimum once a run lasted restartBackoffReset.
const (
	restartBackoffMin   = time.Second
	restartBackoffMax   = 30 * time.Second
	restartBackoffReset = time.Minute
)

// stopGrace is how long a child has after SIGTERM before SIGKILL.
const stopGrace = 10 * time.Second

var errStopping = errors.New("stopping")

// ProcessInfo describes one child of a Node, for the emulator's static pod
// and "containers" reports.
type ProcessInfo struct {
	// Name is the component: etcd, kube-apiserver, kube-controller-manager
	// or kube-scheduler.
	Name string
	// PID is the running child's process id, 0 while it waits to restart.
	PID int
	// Version is the component's version (v3.6.16, v1.36.1).
	Version string
	// Restarts counts the times it was started again after exiting on its own.
	Restarts int
	// StartedAt is when the running child started (zero while it is down).
	StartedAt time.Time
}

// process is one supervised child: it is started again with backoff
// whenever it exits on its own, until stop.
type process struct {
	name, version string
	path          string
	args          []string
	log           *logSink

	stopCh chan struct{}
	done   chan struct{}

	mu       sync.Mutex
	cmd      *exec.Cmd // the running child, nil while it is down
	started  time.Time
	exits    int // how many times it exited on its own
	restarts int
	stopping bool
}

// startProcess starts the child once (an error here is the binary's) and
// supervises it from a goroutine that ends with stop.
func startProcess(name, version, path string, args []string, log *logSink) (*process, error) {
	p := &process{name: name, version: version, path: path, args: args, log: log,
		stopCh: make(chan struct{}), done: make(chan struct{})}
	cmd, err := p.start(false)
	if err != nil {
		return nil, err
	}
	go p.supervise(cmd)
	return p, nil
}

func (p *process) start(restart bool) (*exec.Cmd, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping {
		return nil, errStopping
	}
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = childEnv()
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own process group, so a terminal's ^C reaches the emulator
		// only, which stops its children in order.
		Setpgid: true,
		// Killed with the emulator (strictly: with the OS thread that
		// started it, which the Go runtime keeps while the program runs).
		Pdeathsig: syscall.SIGKILL,
	}
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", p.name, err)
	}
	if restart {
		p.restarts++
	}
	p.cmd, p.started = cmd, time.Now()
	return cmd, nil
}

func (p *process) supervise(cmd *exec.Cmd) {
	defer close(p.done)
	defer p.log.close()
	backoff := restartBackoffMin
	for {
		if cmd != nil {
			err := cmd.Wait()
			p.mu.Lock()
			ran := time.Since(p.started)
			p.cmd = nil
			stopping := p.stopping
			if !stopping {
				p.exits++
			}
			p.mu.Unlock()
			if stopping {
				return
			}
			if ran >= restartBackoffReset {
				backoff = restartBackoffMin
			}
			p.log.note(fmt.Sprintf("%s exited (%v) after %s; restarting in %s", p.name, exitReason(err), ran.Round(time.Millisecond), backoff))
		}
		t := time.NewTimer(backoff)
		select {
		case <-p.stopCh:
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, restartBackoffMax)
		var err error
		if cmd, err = p.start(true); err != nil {
			if errors.Is(err, errStopping) {
				return
			}
			p.log.note(err.Error())
		}
	}
}

func exitReason(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// stop sends SIGTERM, then SIGKILL after grace, and waits for the child
// and its supervisor. Safe to call more than once and concurrently.
func (p *process) stop(grace time.Duration) {
	p.mu.Lock()
	if !p.stopping {
		p.stopping = true
		close(p.stopCh)
	}
	cmd := p.cmd
	p.mu.Unlock()
	if cmd != nil {
		// os.Process signals through a pidfd: never another process that
		// reused the pid of one already reaped.
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return
	case <-t.C:
	}
	if cmd != nil {
		p.log.note(fmt.Sprintf("%s did not stop within %s of SIGTERM; killing it", p.name, grace))
		_ = cmd.Process.Kill()
	}
	<-p.done
}

// exited reports whether the child has exited on its own since it started.
func (p *process) exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exits > 0
}

func (p *process) info() ProcessInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := ProcessInfo{Name: p.name, Version: p.version, Restarts: p.restarts}
	if p.cmd != nil {
		i.PID, i.StartedAt = p.cmd.Process.Pid, p.started
	}
	return i
}

// childEnv is the emulator's environment without proxy settings: the
// components talk to each other on the node's own addresses, which a proxy
// meant for the internet must not see.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(k) {
		case "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY":
			continue
		}
		env = append(env, kv)
	}
	return env
}
