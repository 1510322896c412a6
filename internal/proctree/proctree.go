// Package proctree marks the processes RezusCloud starts that start
// processes of their own (tofu and its provider plugins), so that what
// outlives its owner can be found and ended: Pdeathsig ends tofu with the
// server, but tofu's plugins are its children, not the server's, and a
// killed tofu leaves them to init. The marks are environment variables,
// which children inherit. the tofu engine marks tofu, the server ends orphans at
// start-up, and test suites (internal/leaktest) fail on what is left.
package proctree

import (
	"fmt"
	"os"
	"strconv"
)

const (
	// OwnerEnv carries the pid of the process that started tofu.
	OwnerEnv = "REZUSCLOUD_OWNER_PID"
	// RootEnv carries the pid of the process at the root of a tree (a
	// test binary): set once, inherited by everything below it.
	RootEnv = "REZUSCLOUD_ROOT_PID"
)

// Marks are the environment entries a child that may outlive this process
// gets: this process as its owner, and the root this process belongs to.
func Marks() []string {
	m := []string{OwnerEnv + "=" + strconv.Itoa(os.Getpid())}
	if root := os.Getenv(RootEnv); root != "" {
		m = append(m, RootEnv+"="+root)
	}
	return m
}

// MarkRoot makes this process the root of its tree, unless it is in one.
func MarkRoot() {
	if os.Getenv(RootEnv) == "" {
		_ = os.Setenv(RootEnv, strconv.Itoa(os.Getpid()))
	}
}

// Proc is a marked process.
type Proc struct {
	PID   int
	Owner int
	// Cmd is its command line's first word.
	Cmd string
}

func (p Proc) String() string { return fmt.Sprintf("%d %s (owner %d)", p.PID, p.Cmd, p.Owner) }
