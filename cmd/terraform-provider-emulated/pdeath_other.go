//go:build !linux

package main

// dieWithParent has no way to ask for it here: the server's process group
// kill ends the plugin when it stops tofu.
func dieWithParent() {}
