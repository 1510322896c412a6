package proctree

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// scan reads the marks of every process this user may read, but this one.
func scan(keep func(env map[string]string) bool) []Proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []Proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(raw, []byte(OwnerEnv)) && !bytes.Contains(raw, []byte(RootEnv)) {
			continue
		}
		env := map[string]string{}
		for _, kv := range bytes.Split(raw, []byte{0}) {
			if k, v, ok := bytes.Cut(kv, []byte("=")); ok && (string(k) == OwnerEnv || string(k) == RootEnv) {
				env[string(k)] = string(v)
			}
		}
		if !keep(env) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		first, _, _ := bytes.Cut(cmdline, []byte{0})
		owner, _ := strconv.Atoi(env[OwnerEnv])
		out = append(out, Proc{PID: pid, Owner: owner, Cmd: filepath.Base(string(first))})
	}
	return out
}

// alive reports whether pid exists.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Orphans are the marked processes whose owner is gone.
func Orphans() []Proc {
	return scan(func(env map[string]string) bool {
		owner, err := strconv.Atoi(env[OwnerEnv])
		return err == nil && owner > 1 && !alive(owner)
	})
}

// Descendants are the processes of the tree rooted at root (RootEnv).
func Descendants(root int) []Proc {
	r := strconv.Itoa(root)
	return scan(func(env map[string]string) bool { return env[RootEnv] == r })
}

// Kill ends the processes with SIGKILL; those gone meanwhile are no error.
func Kill(ps []Proc) {
	for _, p := range ps {
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
	}
}
