package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
)

func abCommand() *cli.Command {
	return &cli.Command{
		Name:  "ab",
		Usage: "the regression gate: measure a base server and the server under test in turns on this machine, and fail when the one under test is clearly slower",
		Description: "Runs the write phases of `rezusbench api` (raw JetStream publishes, then API creates and updates\n" +
			"at each --clients level) against --base and --server in turns, A B then B A alternately, each run on a fresh\n" +
			"server and data dir, then compares the medians of each ratio (API over raw publish, b/a). It fails\n" +
			"when a median of the server under test is below --floor times the base's. Both run on this machine\n" +
			"in this run, so a slow or loaded host slows both: recorded figures from another machine are no floor.\n" +
			"A verdict below the floor is confirmed with --confirm more rounds before it fails.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "base", Required: true, Usage: "the base rezuscloud binary (built from the commit docs/benchmarks.json records)"},
			&cli.IntFlag{Name: "rounds", Value: 3, Usage: "rounds of one base run and one run of the server under test"},
			&cli.IntFlag{Name: "confirm", Value: 2, Usage: "more rounds run when the first verdict fails, before failing on all of them"},
			&cli.DurationFlag{Name: "duration", Value: time.Second, Usage: "length of each throughput phase"},
			&cli.StringFlag{Name: "clients", Value: "1,8,64", Usage: "concurrency levels"},
			&cli.Float64Flag{Name: "floor", Value: 0.75, Usage: "the smallest acceptable median ratio of the server under test, as a fraction of the base's"},
		},
		Action: runAB,
	}
}

func runAB(c *cli.Context) error {
	ctx := c.Context
	levels, err := parseLevels(c.String("clients"))
	if err != nil {
		return err
	}
	if c.Int("rounds") < 1 || c.Int("confirm") < 0 {
		return errors.New("--rounds must be at least 1 and --confirm not negative")
	}
	if f := c.Float64("floor"); f <= 0 || f > 1 {
		return fmt.Errorf("--floor %g: want a fraction in (0, 1]", f)
	}
	cur, err := serverBinary(c)
	if err != nil {
		return err
	}
	base := c.String("base")
	for _, exe := range []string{base, cur} {
		if st, err := os.Stat(exe); err != nil || st.IsDir() {
			return fmt.Errorf("server binary %s: not a file", exe)
		}
	}
	machine := fmt.Sprintf("%d CPUs, GOMAXPROCS=%d, %s/%s", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH)
	fmt.Printf("# rezusbench ab\n\n%s, %s\n\nA (base): %s\nB (under test): %s\n\n", time.Now().UTC().Format(time.RFC3339), machine, base, cur)
	var runs abRuns
	type side struct {
		name, exe string
		into      *[]*figures
	}
	a, b := side{"A", base, &runs.base}, side{"B", cur, &runs.current}
	round := func() error {
		// Every other round runs B first (A B, B A, A B, …): a machine that
		// warms up or slows down within a round then favours neither side.
		// With A always first, the same binary on both sides read 0.92×.
		n := len(runs.current) + 1
		order := []side{a, b}
		if n%2 == 0 {
			order = []side{b, a}
		}
		for _, s := range order {
			fmt.Printf("### round %d, %s\n\n", n, s.name)
			f, err := measureOnce(ctx, s.exe, levels, c.Duration("duration"))
			if err != nil {
				return fmt.Errorf("round %d, %s (%s): %w", n, s.name, s.exe, err)
			}
			*s.into = append(*s.into, f)
			fmt.Println()
		}
		return nil
	}
	for range c.Int("rounds") {
		if err := round(); err != nil {
			return err
		}
	}
	rows, failed := abVerdict(runs, c.Float64("floor"))
	if len(failed) > 0 && c.Int("confirm") > 0 {
		printAB(rows)
		fmt.Printf("\n== below %.2f× the base on %s: confirming with %d more rounds\n\n", c.Float64("floor"), strings.Join(failed, ", "), c.Int("confirm"))
		for range c.Int("confirm") {
			if err := round(); err != nil {
				return err
			}
		}
		rows, failed = abVerdict(runs, c.Float64("floor"))
	}
	printAB(rows)
	if len(failed) > 0 {
		return fmt.Errorf("the server under test is slower than the base (median below %.2f× on %s over %d rounds)",
			c.Float64("floor"), strings.Join(failed, ", "), len(runs.current))
	}
	fmt.Printf("\nno ratio's median below %.2f× the base's over %d rounds\n", c.Float64("floor"), len(runs.current))
	return nil
}

// measureOnce runs the write phases on a fresh server of exe and data dir.
func measureOnce(ctx context.Context, exe string, levels []int, d time.Duration) (*figures, error) {
	dir, err := os.MkdirTemp("", "rezus-bench-ab-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	env, stop, err := startBenchServer(ctx, exe, dir, "", "")
	if err != nil {
		return nil, err
	}
	defer stop()
	figs := newFigures("", "")
	fmt.Println("| phase | clients | ops | ops/s | p50 | p99 | b/a |")
	fmt.Println("|---|---|---|---|---|---|---|")
	if err := env.measureWrites(ctx, levels, d, figs); err != nil {
		return nil, err
	}
	return figs, nil
}

// abRuns are the figures of each side's runs, in the order they ran.
type abRuns struct {
	base, current []*figures
}

// abRow is one ratio's verdict: the medians of each side's runs.
type abRow struct {
	Key                 string
	Base, Current       float64
	BaseRuns, CurRuns   []float64
	Relative            float64
	BaseOps, CurrentOps float64
}

// abVerdict compares, ratio by ratio, the median of the runs under test with
// the median of the base's, and gates each write path (create, update) on the
// geometric mean of its ratios' B/A over the client levels: a path is slower
// when that mean falls below floor. Medians, not means: one run disturbed by
// the machine moves a median of three little. Per path, not per level: on 2
// busy cores one level's median of 1 s phases still strays by a third now
// and then, while a real regression slows a path at every level. p99s are
// not gated (too noisy in 1 s phases); absolute rates are shown, not gated
// (the ratio to the raw publish rate takes the machine's drift out).
func abVerdict(runs abRuns, floor float64) (rows []abRow, failed []string) {
	keys := map[string]bool{}
	for _, f := range slices.Concat(runs.base, runs.current) {
		for k := range f.Ratios {
			keys[k] = true
		}
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	logSum, count := map[string]float64{}, map[string]int{}
	var paths []string
	for _, k := range sorted {
		row := abRow{Key: k}
		row.BaseRuns, row.Base = medianOf(runs.base, func(f *figures) float64 { return f.Ratios[k] })
		row.CurRuns, row.Current = medianOf(runs.current, func(f *figures) float64 { return f.Ratios[k] })
		_, row.BaseOps = medianOf(runs.base, func(f *figures) float64 { return f.OpsPerSecond[k] })
		_, row.CurrentOps = medianOf(runs.current, func(f *figures) float64 { return f.OpsPerSecond[k] })
		path, _, _ := strings.Cut(k, "/")
		if row.Base > 0 {
			row.Relative = row.Current / row.Base
			if count[path] == 0 {
				paths = append(paths, path)
			}
			// A side that measured nothing is as slow as can be.
			logSum[path] += math.Log(max(row.Relative, 1e-9))
			count[path]++
		}
		rows = append(rows, row)
	}
	for _, p := range paths {
		rel := math.Exp(logSum[p] / float64(count[p]))
		rows = append(rows, abRow{Key: p + " (geometric mean over the levels)", Relative: rel})
		if rel < floor {
			failed = append(failed, fmt.Sprintf("%s (%.2f×)", p, rel))
		}
	}
	return rows, failed
}

// medianOf is each run's value (in run order) and their median; the median
// of an even count is the mean of the middle two.
func medianOf(runs []*figures, value func(*figures) float64) ([]float64, float64) {
	vals := make([]float64, 0, len(runs))
	for _, f := range runs {
		vals = append(vals, value(f))
	}
	if len(vals) == 0 {
		return vals, 0
	}
	s := slices.Clone(vals)
	sort.Float64s(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return vals, m
}

func printAB(rows []abRow) {
	fmt.Println("| ratio (API / raw publish) | A: base runs | B: under test runs | A median | B median | B / A | ops/s A → B (medians) |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, r := range rows {
		if r.BaseRuns == nil {
			fmt.Printf("| **%s** | | | | | **%.2f** | |\n", r.Key, r.Relative)
			continue
		}
		fmt.Printf("| %s | %s | %s | %.3f | %.3f | %.2f | %.0f → %.0f |\n", r.Key, fmtRuns(r.BaseRuns), fmtRuns(r.CurRuns),
			r.Base, r.Current, r.Relative, r.BaseOps, r.CurrentOps)
	}
}

func fmtRuns(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.3f", x)
	}
	return strings.Join(s, " ")
}
