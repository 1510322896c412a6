//go:build !linux

package tofu

import (
	"context"
	"errors"
	"os/exec"
)

func sandboxCommand(context.Context, sandboxSpec, []string, ...string) (*exec.Cmd, error) {
	return nil, errors.New("tofu sandbox: only on Linux (mount and PID namespaces); run without one only where modules are trusted")
}

// ProbeSandbox reports that there is no sandbox here.
func ProbeSandbox(context.Context, *Sandbox) error {
	return errors.New("tofu sandbox: only on Linux (mount and PID namespaces)")
}
