//go:build !linux

package proctree

// Orphans finds nothing where there is no /proc to read.
func Orphans() []Proc { return nil }

// Descendants finds nothing where there is no /proc to read.
func Descendants(int) []Proc { return nil }

// Kill does nothing: there is nothing found to end.
func Kill([]Proc) {}
