//go:build !linux

package tofu

import "syscall"

// tofuProcAttr puts tofu in its own process group. Only Linux can have the
// kernel kill it with the server (Pdeathsig); elsewhere (the darwin release
// binary) killStaleGroup ends a group a crashed server left behind.
func tofuProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
