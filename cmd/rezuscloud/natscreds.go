package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/eventstore"
)

// natsCredsCommand mints short-lived full-access credentials for the
// embedded server's listener (--nats-listen), for the operator's own tools.
// They used to lie on disk in plain, rewritten at every start (issue 27).
func natsCredsCommand() *cli.Command {
	return &cli.Command{
		Name:  "nats-creds",
		Usage: "print short-lived credentials of the server's NATS account with full access (for the nats CLI on --nats-listen)",
		Description: "Signs a user of the REZUS account with the account seed in <data-dir>/nats-keys and prints its\n" +
			".creds text: save it 0600 and pass it to `nats --creds`. It expires after --ttl; a server started\n" +
			"later revokes it. Whoever can read the data dir can make these: guard it as the keys it holds.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data-dir", Value: "./data", EnvVars: []string{"REZUSCLOUD_DATA_DIR"}, Usage: "the server's data dir"},
			&cli.DurationFlag{Name: "ttl", Value: time.Hour, Usage: "how long the credentials work (at most 24h)"},
			&cli.StringFlag{Name: "name", Value: "operator", Usage: "the user's name, as the server's logs show it"},
		},
		Action: func(c *cli.Context) error {
			ttl := c.Duration("ttl")
			if ttl <= 0 || ttl > 24*time.Hour {
				return fmt.Errorf("--ttl %s: want more than 0 and at most 24h", ttl)
			}
			creds, err := eventstore.MintCredentials(c.String("data-dir"), c.String("name"), ttl)
			if err != nil {
				return err
			}
			_, err = c.App.Writer.Write(creds)
			return err
		},
	}
}
