package release

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rezuscloud/rezuscloud/internal/tofutest"
)

// Server returns the path of the rezuscloud server built from commit and
// stamped as version, building it once into the tools dir
// ($REZUS_TOOLS_DIR/releases/<full commit>/rezuscloud, kept across runs:
// a commit's source never changes). It fails the test, never skips it,
// when the clone lacks the commit (a shallow clone: fetch its history).
func Server(t testing.TB, version, commit string) string {
	t.Helper()
	bin, err := buildServer(version, commit)
	if err != nil {
		t.Fatalf("building rezuscloud %s (commit %s): %v", version, commit, err)
	}
	return bin
}

func buildServer(version, commit string) (string, error) {
	root, err := tofutest.RepoRoot()
	if err != nil {
		return "", err
	}
	full, err := git(root, "rev-parse", "--verify", "--quiet", commit+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("this clone has no commit %s: it needs the full history (git fetch --unshallow)", commit)
	}
	tools, err := tofutest.ToolsDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(tools, "releases", full)
	bin := filepath.Join(dir, "rezuscloud")
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}

	// Test binaries of several packages may ask at once: one builds, the
	// others wait on the lock and find the binary.
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing unlocks too
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}

	// git archive rather than a worktree: nothing to unregister when a run
	// is killed halfway, and the shared clone's state is left alone.
	src, err := os.MkdirTemp("", "rezuscloud-"+version+"-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, full, src)
	if out, err := archive.CombinedOutput(); err != nil {
		return "", fmt.Errorf("unpacking the source: %v: %s", err, out)
	}
	tmp := bin + ".tmp"
	build := exec.Command("go", "build", "-trimpath", "-o", tmp,
		"-ldflags", "-X main.version="+version+" -X main.commit="+full, "./cmd/rezuscloud")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v: %s", err, out)
	}
	return bin, os.Rename(tmp, bin)
}

func git(dir string, args ...string) (string, error) {
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, ee.Stderr)
	}
	return strings.TrimSpace(string(out)), err
}
