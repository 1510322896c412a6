package tofu

import "syscall"

// tofuProcAttr puts tofu in its own process group, so a cancel reaches the
// provider plugins too, and has the kernel kill it when the server dies (a
// restart must not race a leftover tofu).
func tofuProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
