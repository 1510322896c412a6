package apply

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// tofuCall is one command the worker asked tofu to run.
type tofuCall struct {
	Dir  string
	Env  []string
	Args []string
	// Interrupted says ctx ended while the command ran.
	Interrupted bool
}

// fakeTofu is a tofu.Runner that records what it was asked to run and answers
// as tofu would, without tofu: init succeeds, `state pull` prints the state it
// holds, apply prints tofu's JSON UI and, on success, leaves stateAfter
// (destroy: no state). It also is the worker's StateStore and StateCredentials,
// so "has state" follows what the fake applied.
type fakeTofu struct {
	// stateAfter is the state a successful apply leaves.
	stateAfter []byte

	mu    sync.Mutex
	calls []tofuCall
	state []byte
	// revision counts the writes of state (StateRevision; 0 before any).
	revision uint64
	// failApplies is how many applies still fail before one succeeds.
	failApplies int
	// block makes applies wait until their ctx ends.
	block bool
	// planDiagnostic, when set, is the error diagnostic (a line of tofu's
	// JSON UI) plans print before failing.
	planDiagnostic string
	// started receives the args of each apply as it starts.
	started chan []string
	// planBlocked is sent to as a plan starts blocking (block).
	planBlocked chan struct{}
	// onApply, when set, runs as an apply starts.
	onApply     func(args []string)
	deleted     []string
	forceUnlock int
	// issued and revoked are the user names of state credentials.
	issued, revoked []string
}

func newFakeTofu(stateAfter []byte) *fakeTofu {
	return &fakeTofu{stateAfter: stateAfter, started: make(chan []string, 16), planBlocked: make(chan struct{}, 16)}
}

func (f *fakeTofu) RunTofu(ctx context.Context, dir string, env []string, out io.Writer, args ...string) error {
	f.mu.Lock()
	f.calls = append(f.calls, tofuCall{Dir: dir, Env: slices.Clone(env), Args: slices.Clone(args)})
	idx := len(f.calls) - 1
	state := f.state
	block := f.block
	planDiagnostic := f.planDiagnostic
	fail := false
	if args[0] == "apply" && f.failApplies > 0 {
		f.failApplies--
		fail = true
	}
	onApply := f.onApply
	f.mu.Unlock()
	switch args[0] {
	case "init":
		// As tofu does: the installed providers and modules go in .terraform.
		return os.MkdirAll(filepath.Join(dir, ".terraform"), 0o700)
	case "state":
		_, _ = out.Write(state)
		return nil
	case "plan":
		if block {
			// Interrupted, tofu stops its walk and says only this.
			f.planBlocked <- struct{}{}
			<-ctx.Done()
			fmt.Fprintln(out, `{"@level":"error","@message":"Error: execution halted","type":"diagnostic","diagnostic":{"severity":"error","summary":"execution halted","detail":""}}`)
			return errors.New("tofu plan: exit status 1")
		}
		if planDiagnostic != "" {
			fmt.Fprintln(out, planDiagnostic)
			return errors.New("tofu plan: exit status 1")
		}
		fmt.Fprintln(out, `{"@level":"info","@message":"Plan: 0 to add, 0 to change, 0 to destroy.","type":"change_summary","changes":{"add":0,"change":0,"remove":0,"operation":"plan"}}`)
		return nil
	case "apply":
	default:
		return fmt.Errorf("fake tofu: unexpected command %q", args)
	}
	if onApply != nil {
		onApply(args)
	}
	f.started <- slices.Clone(args)
	destroy := slices.Contains(args, "-destroy")
	fmt.Fprintln(out, `{"@level":"info","@message":"OpenTofu 1.10.10","type":"version"}`)
	fmt.Fprintln(out, `{"@level":"info","@message":"emulated_machine.cp[\"cp-0\"]: Creating...","type":"apply_start"}`)
	if block {
		<-ctx.Done()
		f.mu.Lock()
		f.calls[idx].Interrupted = true
		f.mu.Unlock()
		fmt.Fprintln(out, `{"@level":"info","@message":"Interrupt received.","type":"log"}`)
		return fmt.Errorf("tofu apply: %w", context.Cause(ctx))
	}
	if fail {
		fmt.Fprintln(out, `{"@level":"error","@message":"Error: Could not create emulated machine","type":"diagnostic","diagnostic":{"severity":"error","summary":"Could not create emulated machine","detail":"the emulator is not answering","address":"emulated_machine.cp[\"cp-0\"]"}}`)
		return errors.New("tofu apply: exit status 1")
	}
	f.mu.Lock()
	if destroy {
		f.state = nil
		f.revision++
		fmt.Fprintln(out, `{"@level":"info","@message":"Destroy complete! Resources: 1 destroyed.","type":"change_summary","changes":{"add":0,"change":0,"remove":1,"operation":"destroy"}}`)
	} else {
		f.state = f.stateAfter
		f.revision++
		fmt.Fprintln(out, `{"@level":"info","@message":"Apply complete! Resources: 1 added, 0 changed, 0 destroyed.","type":"change_summary","changes":{"add":1,"change":0,"remove":0,"operation":"apply"}}`)
	}
	f.mu.Unlock()
	return nil
}

// applies is the args of the apply commands run so far.
func (f *fakeTofu) applies() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out [][]string
	for _, c := range f.calls {
		if c.Args[0] == "apply" {
			out = append(out, c.Args)
		}
	}
	return out
}

func (f *fakeTofu) callsOf(verb string) []tofuCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []tofuCall
	for _, c := range f.calls {
		if c.Args[0] == verb {
			out = append(out, c)
		}
	}
	return out
}

func (f *fakeTofu) set(fn func(f *fakeTofu)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// StateStore.

func (f *fakeTofu) LockHolderApply(context.Context, string) (string, error) { return "", nil }

func (f *fakeTofu) ForceUnlock(context.Context, string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forceUnlock++
	return nil
}

func (f *fakeTofu) DeleteState(_ context.Context, tenant string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = append(f.deleted, tenant)
	f.state = nil
	f.revision++
	return nil
}

func (f *fakeTofu) StateRevision(context.Context, string) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(strings.TrimSpace(string(f.state))) == 0 {
		return 0, nil
	}
	return f.revision, nil
}

func (f *fakeTofu) State(context.Context, string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]byte(nil), f.state...), nil
}

func (f *fakeTofu) HasState(context.Context, string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(strings.TrimSpace(string(f.state))) > 0, nil
}

// StateKeys (for Config.Validate; runs use eventstore.StateKeys).

func (f *fakeTofu) StateKey(context.Context, string) ([]byte, error) {
	return []byte("0123456789abcdef0123456789abcdef"), nil
}

func (f *fakeTofu) DeleteStateKey(context.Context, string) error { return nil }

// StateCredentials.

func (f *fakeTofu) IssueStateCredentials(_ context.Context, tenant, applyID string, _ time.Duration) (string, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.issued = append(f.issued, "apply-"+applyID)
	return "apply-" + applyID, "secret-of-" + tenant, nil
}

func (f *fakeTofu) RevokeStateCredentials(_ context.Context, user, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.revoked = append(f.revoked, user)
	return nil
}

// credentials is the state credentials issued and revoked so far, by user name.
func (f *fakeTofu) credentials() (issued, revoked []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.issued), slices.Clone(f.revoked)
}
