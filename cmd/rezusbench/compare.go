package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

// figures are one run's results as docs/benchmarks.json records them.
// Ratios are what `rezusbench ab` gates on: each is a throughput of the API
// divided by the raw JetStream publish rate at the same concurrency on the
// same machine in the same run, which takes out much of a machine's noise;
// still, a ratio recorded on one host is no floor on another (issue 26), so
// a gate compares only runs made on one machine in one run.
type figures struct {
	Recorded string `json:"recorded"`
	Machine  string `json:"machine"`
	Command  string `json:"command"`
	// Commit is the commit these figures measured: the base the regression
	// gate (`go tool task bench:check`) builds and measures again beside
	// the code under test.
	Commit string `json:"commit,omitempty"`
	// Ratios by "<phase>/<clients>": "create/64" is API creates at 64
	// clients over raw publishes at 64 clients (b/a).
	Ratios map[string]float64 `json:"ratios"`
	// Absolute figures, informative only.
	OpsPerSecond map[string]float64 `json:"opsPerSecond"`
	P99Millis    map[string]float64 `json:"p99Millis"`
	RSSMiB       float64            `json:"rssMiB,omitempty"`
}

func newFigures(machine, command string) *figures {
	return &figures{Recorded: time.Now().UTC().Format(time.RFC3339), Machine: machine, Command: command,
		Ratios: map[string]float64{}, OpsPerSecond: map[string]float64{}, P99Millis: map[string]float64{}}
}

// add records a phase's throughput and p99 under key, and its ratio when it has one.
func (f *figures) add(key string, r *result, ratio float64) {
	f.OpsPerSecond[key] = round2(r.rate())
	f.P99Millis[key] = round2(float64(r.pct(0.99).Microseconds()) / 1000)
	if ratio > 0 {
		// Four places: single-client ratios are near 0.1, where two
		// places would blur a 10 % change.
		f.Ratios[key] = float64(int64(ratio*10000+0.5)) / 10000
	}
}

func round2(v float64) float64 { return float64(int64(v*100+0.5)) / 100 }

func (f *figures) write(path string) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func readFigures(path string) (*figures, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--compare: %w", err)
	}
	f := &figures{}
	if err := json.Unmarshal(b, f); err != nil {
		return nil, fmt.Errorf("--compare: %s: %w", path, err)
	}
	if len(f.Ratios) == 0 {
		return nil, fmt.Errorf("--compare: %s records no ratios", path)
	}
	return f, nil
}

// comparison is one ratio now against the one recorded.
type comparison struct {
	Key               string
	Recorded, Current float64
	// Relative is Current / Recorded: 1 is as recorded, below 1 slower.
	Relative float64
	Missing  bool
}

// compareFigures sets each recorded ratio against this run's, for the reader
// (a ratio this run did not measure is missing: --clients may differ).
func compareFigures(recorded, current *figures) []comparison {
	keys := make([]string, 0, len(recorded.Ratios))
	for k := range recorded.Ratios {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	rows := make([]comparison, 0, len(keys))
	for _, k := range keys {
		rec := recorded.Ratios[k]
		cur, ok := current.Ratios[k]
		row := comparison{Key: k, Recorded: rec, Current: cur, Missing: !ok}
		if ok && rec > 0 {
			row.Relative = cur / rec
		}
		rows = append(rows, row)
	}
	return rows
}

// printComparison writes the comparison as a Markdown table.
func printComparison(path string, recorded *figures, rows []comparison) {
	fmt.Printf("\n## beside %s (recorded %s on %s; information, not a gate)\n\n", path, recorded.Recorded, recorded.Machine)
	fmt.Println("| ratio (API / raw publish) | recorded | now | now / recorded |")
	fmt.Println("|---|---|---|---|")
	for _, r := range rows {
		if r.Missing {
			fmt.Printf("| %s | %.2f | not measured | - |\n", r.Key, r.Recorded)
			continue
		}
		fmt.Printf("| %s | %.2f | %.2f | %.2f |\n", r.Key, r.Recorded, r.Current, r.Relative)
	}
}

// phaseKey names a phase in figures.
func phaseKey(phase string, clients int) string {
	if clients == 0 {
		return phase
	}
	return fmt.Sprintf("%s/%d", strings.ToLower(phase), clients)
}
