package main

import "github.com/urfave/cli/v2"

func benchCommand() *cli.Command {
	return &cli.Command{Name: "bench", Usage: "measure the event store and the API (see docs/benchmarks.md)",
		Action: func(c *cli.Context) error { return runBench(c) }}
}
