//go:build !unix

package eventstore

import "errors"

// ErrDataDirInUse is returned when another process runs an embedded server
// on the same data dir (detected on unix systems only).
var ErrDataDirInUse = errors.New("the data dir is in use by a running rezuscloud server")

func lockDataDir(string) (func(), error) { return func() {}, nil }
