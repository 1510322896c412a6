//go:build race

package emulator

// raceEnabled: the race detector slows byte-heavy tests about tenfold.
const raceEnabled = true
