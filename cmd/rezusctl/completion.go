package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
)

// The completion scripts are urfave/cli v2's (autocomplete/bash_autocomplete
// and zsh_autocomplete), which ask the program itself for candidates with
// --generate-bash-completion. They are copied here because the module does
// not embed them.
const bashCompletion = `# bash completion for rezusctl; load with: source <(rezusctl completion bash)
_rezusctl_bash_autocomplete() {
  if [[ "${COMP_WORDS[0]}" != "source" ]]; then
    local cur opts base words
    COMPREPLY=()
    cur="${COMP_WORDS[COMP_CWORD]}"
    if declare -F _init_completion >/dev/null 2>&1; then
      _init_completion -n "=:" || return
    else
      COMPREPLY=()
      _get_comp_words_by_ref -n "=:" cur prev words cword
    fi
    words=("${words[@]:0:$cword}")
    if [[ "$cur" == "-"* ]]; then
      requestComp="${words[*]} ${cur} --generate-bash-completion"
    else
      requestComp="${words[*]} --generate-bash-completion"
    fi
    opts=$(eval "${requestComp}" 2>/dev/null)
    COMPREPLY=($(compgen -W "${opts}" -- ${cur}))
    return 0
  fi
}
complete -o bashdefault -o default -o nospace -F _rezusctl_bash_autocomplete PROG
`

const zshCompletion = `#compdef PROG
# zsh completion for rezusctl; load with: source <(rezusctl completion zsh)
_rezusctl_zsh_autocomplete() {
  local -a opts
  local cur
  cur=${words[-1]}
  if [[ "$cur" == "-"* ]]; then
    opts=("${(@f)$(${words[@]:0:#words[@]-1} ${cur} --generate-bash-completion)}")
  else
    opts=("${(@f)$(${words[@]:0:#words[@]-1} --generate-bash-completion)}")
  fi
  if [[ "${opts[1]}" != "" ]]; then
    _describe 'values' opts
  else
    _files
  fi
}
compdef _rezusctl_zsh_autocomplete PROG
`

func (r *rezusctl) completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script (bash, zsh or fish)",
		ArgsUsage: "bash|zsh|fish",
		Description: "  source <(rezusctl completion bash)        # this shell\n" +
			"  rezusctl completion zsh > \"${fpath[1]}/_rezusctl\"\n" +
			"  rezusctl completion fish > ~/.config/fish/completions/rezusctl.fish",
		BashComplete: func(c *cli.Context) {
			fmt.Fprintln(c.App.Writer, "bash\nzsh\nfish")
		},
		Action: func(c *cli.Context) error {
			var script string
			switch c.Args().First() {
			case "bash":
				script = bashCompletion
			case "zsh":
				script = zshCompletion
			case "fish":
				// urfave/cli writes fish completions from the command tree
				// itself (static: commands, subcommands and flags).
				fish, err := c.App.ToFishCompletion()
				if err != nil {
					return fmt.Errorf("writing the fish completion: %w", err)
				}
				script = "# fish completion for rezusctl; install with: rezusctl completion fish > ~/.config/fish/completions/rezusctl.fish\n" + fish
			default:
				return fmt.Errorf("give the shell: bash, zsh or fish")
			}
			_, err := fmt.Fprint(r.env.Stdout, strings.ReplaceAll(script, "PROG", c.App.Name))
			return err
		},
	}
}
