package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCompletionScripts checks every shell's script: printed, naming
// rezusctl, and (where the shell is installed) accepted by the shell's own
// syntax check.
func TestCompletionScripts(t *testing.T) {
	tests := []struct {
		shell string
		// check is the shell's syntax-only run of a file.
		check []string
		want  string
	}{
		{shell: "bash", check: []string{"bash", "-n"}, want: "-F _rezusctl_bash_autocomplete rezusctl\n"},
		{shell: "zsh", check: []string{"zsh", "-n"}, want: "compdef _rezusctl_zsh_autocomplete rezusctl\n"},
		{shell: "fish", check: []string{"fish", "--no-execute"}, want: "complete -c rezusctl -n '__fish_rezusctl_no_subcommand' -f -l server"},
	}
	for _, tt := range tests {
		t.Run(tt.shell, func(t *testing.T) {
			tc := newTestCLI(t)
			script := tc.ok("completion", tt.shell)
			assert.NotEmpty(t, script)
			assert.Contains(t, script, "rezusctl")
			assert.Contains(t, script, tt.want)
			bin, err := exec.LookPath(tt.check[0])
			if err != nil {
				t.Logf("%s is not installed: its syntax check is skipped", tt.check[0])
				return
			}
			f := filepath.Join(t.TempDir(), "rezusctl."+tt.shell)
			require.NoError(t, os.WriteFile(f, []byte(script), 0o600))
			out, err := exec.Command(bin, append(tt.check[1:], f)...).CombinedOutput()
			assert.NoError(t, err, "%s rejects the script:\n%s", tt.shell, out)
		})
	}
	// The commands of this issue are in the fish script, which urfave/cli
	// writes from the command tree.
	fish := newTestCLI(t).ok("completion", "fish")
	for _, c := range []string{"diff", "cancel", "state", "render", "credential"} {
		assert.Contains(t, fish, " "+c+" ", c)
	}
}
