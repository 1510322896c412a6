package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

const machineLogsHelp = "\nA machine's logs come from its Talos API through the server (GET …/machines/{name}/logs and\n" +
	"…/dmesg): name a service with --service (apid, machined, kubelet, etcd, …) or ask for the\n" +
	"kernel's messages with --dmesg.\n\n" +
	"  rezusctl logs machine/cp-1 -t acme --service kubelet -f\n" +
	"  rezusctl logs machine/cp-1 -t acme --dmesg\n" +
	"  rezusctl logs machine/w-2 -t acme --service etcd --tail 100"

func machineLogFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "service", Usage: "with machine/NAME, the Talos service whose log to print (apid, machined, kubelet, etcd, …)"},
		&cli.BoolFlag{Name: "dmesg", Usage: "with machine/NAME, print the kernel's messages"},
		&cli.IntFlag{Name: "tail", Usage: "with machine/NAME and --service, only the last N lines"},
	}
}

// applyLogName takes the apply's name out of "apply/NAME" or "NAME".
func applyLogName(arg string) string {
	if k, name, ok := strings.Cut(arg, "/"); ok {
		if kk, err := resolveKind(k); err == nil && kk.Plural == "applies" {
			return name
		}
	}
	return arg
}

// machineLogTarget says whether logs was asked for a machine's logs
// (machine/NAME or machine NAME) and which one; the machine flags without a
// machine are an error.
func machineLogTarget(c *cli.Context) (string, bool, error) {
	args := c.Args().Slice()
	var k, name string
	switch {
	case len(args) == 1 && strings.Contains(args[0], "/"):
		k, name, _ = strings.Cut(args[0], "/")
	case len(args) == 2:
		k, name = args[0], args[1]
	}
	isMachine := false
	if kk, err := resolveKind(k); k != "" && err == nil && kk.Plural == "machines" {
		isMachine = true
	}
	if !isMachine {
		if c.IsSet("service") || c.Bool("dmesg") || c.IsSet("tail") {
			return "", false, errors.New("--service, --dmesg and --tail are for a machine's logs: rezusctl logs machine/NAME")
		}
		return "", false, nil
	}
	if name == "" {
		return "", false, errors.New("give the machine: rezusctl logs machine/NAME")
	}
	return name, true, nil
}

// machineLogs streams one machine's service log or kernel messages to stdout.
func (r *rezusctl) machineLogs(c *cli.Context, name string) error {
	service, dmesg := c.String("service"), c.Bool("dmesg")
	switch {
	case service == "" && !dmesg:
		return errors.New("name the log: --service SERVICE (apid, machined, kubelet, etcd, …) or --dmesg")
	case service != "" && dmesg:
		return errors.New("give --service or --dmesg, not both")
	case dmesg && c.IsSet("tail"):
		return errors.New("--tail is for a service's log, not --dmesg")
	}
	s, cl, err := r.connect(c)
	if err != nil {
		return err
	}
	tenant, err := requireTenant(s, c)
	if err != nil {
		return err
	}
	q := url.Values{}
	path := "/api/v1/tenants/" + tenant + "/machines/" + name + "/dmesg"
	if !dmesg {
		path = "/api/v1/tenants/" + tenant + "/machines/" + name + "/logs"
		q.Set("service", service)
		if c.IsSet("tail") {
			q.Set("tail", strconv.Itoa(c.Int("tail")))
		}
	}
	if c.Bool("follow") {
		q.Set("follow", "true")
	}
	resp, err := cl.do(c.Context, request{method: http.MethodGet, path: path, query: q, header: http.Header{"Accept": {"text/plain"}}})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(r.env.Stdout, resp.Body)
	if c.Context.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the log of machine %s: %w", name, err)
	}
	return nil
}
