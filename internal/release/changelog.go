// Package release reads the releases RezusCloud has had from CHANGELOG.md and
// builds the server of an earlier one, for the tests that run a release
// beside or after another (rolling upgrades, downgrades). Only tests import
// it.
//
// A release is a second-level heading of CHANGELOG.md, newest first:
//
//	## 0.2.0 (unreleased)
//	## 0.1.0 (2026-12-06, commit 2817901)
//
// Only the newest may be unreleased; every other names the date and the
// commit it was cut from. The newest one's version is the one in
// internal/buildinfo/VERSION.
package release

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/Masterminds/semver/v3"
)

// Entry is one release's heading.
type Entry struct {
	// Version is the semantic version, without a "v".
	Version string
	// Date is the day it was released (YYYY-MM-DD); empty while unreleased.
	Date string
	// Commit is the abbreviated or full commit it was cut from; empty while
	// unreleased.
	Commit string
}

// Released reports whether the release has been cut (it names its commit).
func (e Entry) Released() bool { return e.Commit != "" }

var (
	heading    = regexp.MustCompile(`^## (\S+) \((.*)\)\s*$`)
	releasedAs = regexp.MustCompile(`^(\d{4}-\d{2}-\d{2}), commit ([0-9a-f]{7,40})$`)
)

// Parse reads the release headings of a changelog, newest first, and
// refuses one it cannot read: a heading that is not a version, a released
// one without its date and commit, an unreleased one below the newest, or
// versions out of order.
func Parse(r io.Reader) ([]Entry, error) {
	var out []Entry
	var prev *semver.Version
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if !strings.HasPrefix(line, "## ") {
			continue
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("line %d: %q is not \"## X.Y.Z (unreleased)\" or \"## X.Y.Z (YYYY-MM-DD, commit abc1234)\"", n, line)
		}
		v, err := semver.StrictNewVersion(m[1])
		if err != nil {
			return nil, fmt.Errorf("line %d: %q is not a semantic version: %w", n, m[1], err)
		}
		e := Entry{Version: m[1]}
		if m[2] != "unreleased" {
			rel := releasedAs.FindStringSubmatch(m[2])
			if rel == nil {
				return nil, fmt.Errorf("line %d: release %s says %q, not \"YYYY-MM-DD, commit abc1234\"", n, m[1], m[2])
			}
			e.Date, e.Commit = rel[1], rel[2]
		} else if len(out) > 0 {
			return nil, fmt.Errorf("line %d: %s is unreleased but not the newest heading", n, m[1])
		}
		if prev != nil && !v.LessThan(prev) {
			return nil, fmt.Errorf("line %d: %s is not older than %s above it: newest first", n, v, prev)
		}
		prev = v
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no release headings (\"## X.Y.Z (…)\")")
	}
	return out, nil
}

// Read parses CHANGELOG.md of the repository at root.
func Read(root string) ([]Entry, error) {
	f, err := os.Open(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	es, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("CHANGELOG.md: %w", err)
	}
	return es, nil
}

// Previous is the release before the newest heading of root's CHANGELOG.md
// (the one this tree is): the one a rolling upgrade starts from and a
// downgrade goes back to.
func Previous(root string) (version, commit string, err error) {
	es, err := Read(root)
	if err != nil {
		return "", "", err
	}
	if len(es) < 2 {
		return "", "", fmt.Errorf("CHANGELOG.md names no release before %s", es[0].Version)
	}
	return es[1].Version, es[1].Commit, nil
}
