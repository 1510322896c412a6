package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// completionFlag is the flag urfave/cli's completion scripts append last.
const completionFlag = "--generate-bash-completion"

// normalizeArgs lets flags go anywhere on the command line, as with kubectl
// (`rezusctl get nodegroups -t acme -o yaml`). urfave/cli v2 parses flags with
// the standard flag package, which stops at the first positional argument, so
// the command line is reordered before parsing: the app's global flags first,
// then the command path, the command's own flags, and the positional
// arguments last. A flag the command also defines belongs to the command.
// Everything after "--" stays positional.
func normalizeArgs(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	rest := append([]string(nil), args[1:]...)
	complete := false
	if n := len(rest); rest[n-1] == completionFlag {
		complete = true
		rest = rest[:n-1]
	}
	var globals, path, flags, positional []string
	commands := app.Commands
	var cmdFlags []cli.Flag
	inCommand, dashDash := false, false
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			dashDash = true
			positional = append(positional, rest[i+1:]...)
			break
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			name, hasValue := splitFlag(a)
			f, dst := findFlag(cmdFlags, name), &flags
			if f == nil || !inCommand {
				if g := findFlag(app.Flags, name); g != nil || !inCommand {
					f, dst = g, &globals
				}
			}
			*dst = append(*dst, a)
			if f != nil && takesValue(f) && !hasValue && i+1 < len(rest) {
				i++
				*dst = append(*dst, rest[i])
			}
			continue
		}
		if len(positional) == 0 {
			if sub := findCommand(commands, a); sub != nil {
				path = append(path, a)
				commands, cmdFlags, inCommand = sub.Subcommands, sub.Flags, true
				continue
			}
		}
		positional = append(positional, a)
	}
	out := append([]string{args[0]}, globals...)
	out = append(out, path...)
	out = append(out, flags...)
	if dashDash || hasFlagLike(positional) {
		out = append(out, "--")
	}
	out = append(out, positional...)
	if complete {
		out = append(out, completionFlag)
	}
	return out
}

// splitFlag returns the name of "-x", "--name" or "--name=value", and whether
// the value came with it.
func splitFlag(a string) (name string, hasValue bool) {
	a = strings.TrimLeft(a, "-")
	name, _, hasValue = strings.Cut(a, "=")
	return name, hasValue
}

func findFlag(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

func takesValue(f cli.Flag) bool {
	if tv, ok := f.(interface{ TakesValue() bool }); ok {
		return tv.TakesValue()
	}
	return true
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

func hasFlagLike(args []string) bool {
	for _, a := range args {
		if strings.HasPrefix(a, "-") && a != "-" {
			return true
		}
	}
	return false
}
