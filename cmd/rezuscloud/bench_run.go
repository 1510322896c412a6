package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

func runBench(c *cli.Context) error { return errors.New("bench: not yet written") }
