package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// dieWithParent makes the kernel kill this plugin when tofu, its parent,
// dies: the server kills tofu's process group when it stops it, but a
// server that is killed takes tofu with it (Pdeathsig) and nothing else,
// and a plugin left to init serves nobody. A parent already gone by now
// means the same.
func dieWithParent() {
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err == nil && os.Getppid() == 1 {
		os.Exit(1)
	}
}
