//go:build readme

// The README test: the commands of README.md's marked blocks, run as a user
// types them (relative paths, the same flags, the same example files) in a
// copy of the repository, each checked against what its comment promises.
// When the README changes, this runs the new text; a command it has no
// expectation for fails it, so the README and reality cannot drift apart.
// Run with `go tool task test:readme` (tools from `go tool task tools`).

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// readmeServer is where the README's server listens.
const readmeServer = "127.0.0.1:8080"

// shellRun is one command's run: its output (stdout and stderr as a
// terminal shows them) and exit code.
type shellRun struct {
	out  string
	code int
}

// readmeEnv runs README commands in a copy of the repository.
type readmeEnv struct {
	t    *testing.T
	dir  string   // the copy: the working directory of every command
	env  []string // the environment of every command
	vars []string // assignments made by earlier lines (PW=…), run before each later line
	// name and address are a machine of the quick start's tenant, for <name>
	// and the talosctl check.
	name, address string
	servers       []bgServer
	// serverStarted is when the last server line started.
	serverStarted time.Time
}

// bgServer is a server line running in the background.
type bgServer struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func TestREADME(t *testing.T) {
	root, err := tofutest.RepoRoot()
	require.NoError(t, err)
	tools, err := tofutest.ToolsDir()
	require.NoError(t, err)
	for _, bin := range []string{"bin/tofu", "bin/talosctl", "mirror"} {
		_, err := os.Stat(filepath.Join(tools, bin))
		require.NoError(t, err, "the README's quick start runs the tools `go tool task tools` builds into %s", tools)
	}
	text, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	blocks, err := readmeBlocks(string(text))
	require.NoError(t, err)
	for _, want := range []string{"first", "curl", "quickstart"} {
		require.NotEmpty(t, blocks[want], "README.md marks no block %q", want)
	}
	if ln, err := net.Listen("tcp", readmeServer); err != nil {
		t.Fatalf("the README's server listens on %s, which is taken: %v", readmeServer, err)
	} else {
		ln.Close()
	}

	e := newReadmeEnv(t, root, tools)
	// In the README's order: the first block's server, its API by curl, then
	// the quick start on the same data dir, as a reader following along does.
	t.Run("first", func(t *testing.T) { e.runBlock(t, blocks["first"], blocks["curl"]) })
	if t.Failed() {
		return
	}
	t.Run("quickstart", func(t *testing.T) { e.runBlock(t, blocks["quickstart"], nil) })
}

// newReadmeEnv copies the repository (without .git, build outputs, data and
// node_modules) into a temporary directory whose .tools is the tools dir, and
// gives commands the caller's Go caches and an empty home.
func newReadmeEnv(t *testing.T, root, tools string) *readmeEnv {
	dir := filepath.Join(t.TempDir(), "rezuscloud")
	require.NoError(t, copyRepo(root, dir))
	require.NoError(t, os.Symlink(tools, filepath.Join(dir, ".tools")))
	home := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		// What the test runner sets that a user has not.
		if k == "REZUS_TOOLS_DIR" || k == "TF_CLI_CONFIG_FILE" || k == "REZUSCONFIG" || k == "HOME" ||
			strings.HasPrefix(k, "REZUSCLOUD_") || strings.HasPrefix(k, "XDG_") {
			continue
		}
		env = append(env, kv)
	}
	// An empty home (rezusctl's config, tofu's), with the Go caches kept:
	// they live under the real home by default.
	env = append(env, "HOME="+home)
	for _, k := range []string{"GOCACHE", "GOMODCACHE", "GOPATH"} {
		out, err := exec.Command("go", "env", k).Output()
		require.NoError(t, err)
		env = append(env, k+"="+strings.TrimSpace(string(out)))
	}
	e := &readmeEnv{t: t, dir: dir, env: env}
	t.Cleanup(e.stopServers)
	return e
}

// copyRepo copies the files of root that a fresh clone has into dst.
func copyRepo(root, dst string) error {
	skip := map[string]bool{".git": true, ".tools": true, "bin": true, "data": true, "dist": true, "node_modules": true}
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if rel != "." && skip[d.Name()] {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case !d.Type().IsRegular(), strings.HasSuffix(d.Name(), ".test"):
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, info.Mode().Perm())
	})
}

// runBlock runs a block's lines in order, then the lines of more (the curl
// block runs while the first block's server serves), then stops its servers.
func (e *readmeEnv) runBlock(t *testing.T, lines, more []readmeLine) {
	defer e.stopServers()
	e.vars = nil // a block's assignments are its own
	for _, l := range append(append([]readmeLine(nil), lines...), more...) {
		x := expectationFor(l)
		if x == nil {
			t.Fatalf("README.md:%d: no expectation for %q (%s): add one to readmeExpectations", l.Line, l.Command, l.Comment)
		}
		cmd := strings.ReplaceAll(l.Command, "<name>", e.name)
		start := time.Now()
		switch {
		case x.skip != "":
			t.Logf("README.md:%d: not run: %s (%s)", l.Line, l.Command, x.skip)
			continue
		case x.server:
			e.startServer(t, l)
		case x.until != nil:
			r := e.follow(t, cmd, x.timeout, x.until)
			t.Logf("README.md:%d printed:\n%s", l.Line, tail(r.out, 8))
			if x.check != nil {
				x.check(t, e, r)
			}
		default:
			r := e.run(t, cmd, x.timeout)
			t.Logf("README.md:%d printed:\n%s", l.Line, tail(r.out, 8))
			require.Equal(t, 0, r.code, "README.md:%d: %s\n%s", l.Line, cmd, r.out)
			if isAssignment(cmd) {
				e.vars = append(e.vars, cmd)
			}
			if x.check != nil {
				x.check(t, e, r)
			}
		}
		t.Logf("README.md:%d ok in %s: %s", l.Line, time.Since(start).Round(time.Millisecond), cmd)
	}
}

var assignment = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`)

func isAssignment(cmd string) bool { return assignment.MatchString(cmd) }

// command is a bash running line after the earlier lines' assignments, in
// its own process group so that it and its children can be stopped together.
func (e *readmeEnv) command(ctx context.Context, line string) *exec.Cmd {
	script := strings.Join(append(append([]string{"set -eo pipefail"}, e.vars...), line), "\n")
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir, cmd.Env = e.dir, e.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// run runs line to its end (at most timeout).
func (e *readmeEnv) run(t *testing.T, line string, timeout time.Duration) shellRun {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := e.command(ctx, line)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s: still running after %s:\n%s", line, timeout, out)
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%s: %v", line, err)
	}
	return shellRun{out: string(out), code: cmd.ProcessState.ExitCode()}
}

// follow runs a command that does not end by itself (a watch, a follow)
// until its output satisfies until, then interrupts it as Ctrl-C does.
func (e *readmeEnv) follow(t *testing.T, line string, timeout time.Duration, until func(string) bool) shellRun {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := e.command(ctx, line)
	var buf bytes.Buffer
	out := &lockedWriter{w: &buf} // proc_test.go's
	cmd.Stdout, cmd.Stderr = out, out
	printed := func() string {
		out.mu.Lock()
		defer out.mu.Unlock()
		return buf.String()
	}
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.After(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !until(printed()) {
		select {
		case <-exited:
			t.Fatalf("%s: ended (exit %d) before showing what the README promises:\n%s", line, cmd.ProcessState.ExitCode(), printed())
		case <-deadline:
			t.Fatalf("%s: did not show what the README promises within %s:\n%s", line, timeout, printed())
		case <-tick.C:
		}
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Errorf("%s: still running 10s after Ctrl-C", line)
	}
	return shellRun{out: printed()}
}

// startServer starts a server line in the background (as `&`, or a second
// terminal, has it) and waits for its /readyz; its output goes to a file
// shown when the test fails.
func (e *readmeEnv) startServer(t *testing.T, l readmeLine) {
	line := strings.TrimSpace(strings.TrimSuffix(l.Command, "&"))
	log, err := os.Create(filepath.Join(e.t.TempDir(), fmt.Sprintf("server-%d.log", l.Line)))
	require.NoError(t, err)
	cmd := e.command(context.Background(), line)
	cmd.Stdout, cmd.Stderr = log, log
	e.serverStarted = time.Now()
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	e.servers = append(e.servers, bgServer{cmd: cmd, exited: exited})
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("server of README.md:%d logged:\n%s", l.Line, tail(string(b), 60))
		}
	})
	// go run builds the server first: minutes on a cold build cache.
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if code, _ := httpGet("http://" + readmeServer + "/readyz"); code == http.StatusOK {
			return
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(log.Name())
			t.Fatalf("README.md:%d: the server exited before it was ready:\n%s", l.Line, tail(string(b), 40))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("README.md:%d: the server was not ready within 5m", l.Line)
		}
	}
}

// stopServers stops the background servers as Ctrl-C does, and checks they
// stop cleanly.
func (e *readmeEnv) stopServers() {
	for _, s := range e.servers {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGINT)
		select {
		case <-s.exited:
		case <-time.After(30 * time.Second):
			e.t.Errorf("a README server did not stop within 30s of SIGINT")
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.exited
		}
	}
	e.servers = nil
	// The next server binds the same address.
	for range 100 {
		if ln, err := net.Listen("tcp", readmeServer); err == nil {
			ln.Close()
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func httpGet(url string) (int, string) {
	resp, err := (&http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}).Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Location") + string(b)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// quickStartBegan is when the last server line started.
func (e *readmeEnv) quickStartBegan() time.Time { return e.serverStarted }
