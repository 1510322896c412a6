//go:build (!e2e && !browser) || readme

package main

import (
	"bufio"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// readmeLine is one command of a README block as a user would type it:
// continuation lines joined, the comment beside it kept apart.
type readmeLine struct {
	// Command is what the shell runs, exactly as written (continuations joined).
	Command string
	// Comment is the text after "  # " on the line: what the README promises.
	Comment string
	// Line is the line number in the README, for messages.
	Line int
}

// readmeMarker introduces a block the README test runs: the next fenced
// block after `<!-- readme-test: NAME -->`.
var readmeMarker = regexp.MustCompile(`^<!-- readme-test: ([a-z0-9-]+) -->$`)

// trailingComment is a comment after a command: white space, "# ", as the
// shell reads one (a quoted "# " would be misread: the README has none).
var trailingComment = regexp.MustCompile(`\s+# (.*)$`)

// readmeBlocks returns the marked blocks of a README, each as its commands in
// order. Lines of comment only and blank lines are left out.
func readmeBlocks(text string) (map[string][]readmeLine, error) {
	blocks := map[string][]readmeLine{}
	sc := bufio.NewScanner(strings.NewReader(text))
	n := 0
	name := ""           // a marker seen, its fence not yet
	inside := ""         // inside this block's fence
	var cont *readmeLine // a command continued with a backslash
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case inside == "" && readmeMarker.MatchString(line):
			if name != "" {
				return nil, fmt.Errorf("line %d: marker %q before block %q had its fence", n, line, name)
			}
			name = readmeMarker.FindStringSubmatch(line)[1]
			if _, dup := blocks[name]; dup {
				return nil, fmt.Errorf("line %d: a second block named %q", n, name)
			}
		case inside == "" && name != "" && strings.HasPrefix(line, "```"):
			inside, name = name, ""
			blocks[inside] = []readmeLine{}
		case inside == "" && name != "" && strings.TrimSpace(line) != "":
			return nil, fmt.Errorf("line %d: text between marker %q and its fenced block", n, name)
		case inside != "" && strings.HasPrefix(line, "```"):
			if cont != nil {
				return nil, fmt.Errorf("line %d: block %q ends inside a continued command", n, inside)
			}
			inside = ""
		case inside != "":
			if cont != nil {
				cont.Command += " " + strings.TrimSpace(line)
			} else {
				trimmed := strings.TrimSpace(line)
				if trimmed == "" || strings.HasPrefix(trimmed, "#") {
					continue
				}
				cont = &readmeLine{Command: trimmed, Line: n}
			}
			if strings.HasSuffix(cont.Command, `\`) {
				cont.Command = strings.TrimSpace(strings.TrimSuffix(cont.Command, `\`))
				continue
			}
			if m := trailingComment.FindStringSubmatchIndex(cont.Command); m != nil {
				cont.Comment = cont.Command[m[2]:m[3]]
				cont.Command = strings.TrimSpace(cont.Command[:m[0]])
			}
			blocks[inside] = append(blocks[inside], *cont)
			cont = nil
		}
	}
	if name != "" || inside != "" {
		return nil, fmt.Errorf("the README ends inside block %q%q", name, inside)
	}
	return blocks, sc.Err()
}

func TestReadmeBlocks(t *testing.T) {
	text := "intro\n<!-- readme-test: one -->\n```sh\n# a comment\ngo run ./x serve \\\n  --flag a &\n\n" +
		"bin/ctl get x   # what it shows\nbin/ctl y # one space\nPW=$(cat f)\n```\n```sh\nnot marked\n```\n<!-- readme-test: two -->\n\n```sh\necho '#not a comment'\n```\n"
	blocks, err := readmeBlocks(text)
	require.NoError(t, err)
	require.Equal(t, map[string][]readmeLine{
		"one": {
			{Command: "go run ./x serve --flag a &", Line: 5},
			{Command: "bin/ctl get x", Comment: "what it shows", Line: 8},
			{Command: "bin/ctl y", Comment: "one space", Line: 9},
			{Command: "PW=$(cat f)", Line: 10},
		},
		"two": {{Command: "echo '#not a comment'", Line: 18}},
	}, blocks)

	for _, bad := range []string{
		"<!-- readme-test: a -->\ntext\n```sh\nx\n```\n",
		"<!-- readme-test: a -->\n```sh\nx \\\n```\n",
		"<!-- readme-test: a -->\n```sh\nx\n",
		"<!-- readme-test: a -->\n```sh\nx\n```\n<!-- readme-test: a -->\n```sh\ny\n```\n",
	} {
		_, err := readmeBlocks(bad)
		require.Error(t, err, bad)
	}
}
