// Command rezusctl is the command-line client of RezusCloud: it logs in, keeps
// named contexts (server, credentials, default tenant) in a config file, and
// drives every resource of the REST API the way kubectl drives Kubernetes.
//
// The client code lives here rather than in a library package because nothing
// else needs it: the server and the web UI never call the API over HTTP, and the
// resource types the CLI shares with the server come from domain.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/rezuscloud/rezuscloud/domain"
)

// version may be stamped at build time with -ldflags "-X main.version=...";
// empty, it is internal/buildinfo/VERSION's.
var version string

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := newRezusctl(osEnv()).run(ctx, os.Args)
	stop()
	os.Exit(code)
}

// cliEnv is everything the CLI takes from the process it runs in, so that
// tests can run it in-process, concurrently, with their own streams and
// environment. The zero value of each optional field is documented.
type cliEnv struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Getenv reads the environment (REZUSCONFIG, HOME, EDITOR); default: none set.
	Getenv func(string) string
	// Now is the clock for AGE columns and --since durations; default time.Now.
	Now func() time.Time
	// StdinIsTerminal says whether a password can be prompted for; default false.
	StdinIsTerminal func() bool
	// StdoutIsTerminal says whether a person watches the output, so that
	// `upgrade --wait` repeats a waiting step's line more often; default
	// false (a log: a line when the wait changes, or every 30 s).
	StdoutIsTerminal func() bool
	// ReadPassword reads a line from the terminal without echo; needed only
	// when StdinIsTerminal is true.
	ReadPassword func() ([]byte, error)
	// EditorIn, EditorOut are the terminal the editor of `edit` runs on;
	// default none (the editor gets no stdin, and its output is discarded).
	EditorIn  io.Reader
	EditorOut io.Writer
	// WatchRetry is the first pause before a dropped watch is re-opened; it
	// doubles up to 5 s. Default 250 ms.
	WatchRetry time.Duration
	// WatchGiveUp is how long a watch keeps trying a server it cannot reach
	// before failing; default 1 minute.
	WatchGiveUp time.Duration
	// Executable is rezusctl's own path, written into kubeconfigs as their
	// credential plugin; default os.Executable.
	Executable func() (string, error)
	// OpenBrowser opens a URL in the user's browser (login --sso); default
	// none: the URL is only printed.
	OpenBrowser func(url string) error
}

func osEnv() cliEnv {
	return cliEnv{
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Getenv:           os.Getenv,
		StdinIsTerminal:  func() bool { return term.IsTerminal(int(os.Stdin.Fd())) },
		StdoutIsTerminal: func() bool { return term.IsTerminal(int(os.Stdout.Fd())) },
		ReadPassword:     func() ([]byte, error) { return term.ReadPassword(int(os.Stdin.Fd())) },
		EditorIn:         os.Stdin, EditorOut: os.Stdout,
		OpenBrowser: openBrowser,
	}
}

// rezusctl is one CLI: its environment and the command tree built on it.
type rezusctl struct {
	env cliEnv
}

func newRezusctl(env cliEnv) *rezusctl {
	if env.Stdin == nil {
		env.Stdin = eofReader{}
	}
	if env.Stdout == nil {
		env.Stdout = io.Discard
	}
	if env.Stderr == nil {
		env.Stderr = io.Discard
	}
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	if env.Now == nil {
		env.Now = time.Now
	}
	if env.StdinIsTerminal == nil {
		env.StdinIsTerminal = func() bool { return false }
	}
	if env.StdoutIsTerminal == nil {
		env.StdoutIsTerminal = func() bool { return false }
	}
	if env.WatchRetry == 0 {
		env.WatchRetry = 250 * time.Millisecond
	}
	if env.WatchGiveUp == 0 {
		env.WatchGiveUp = time.Minute
	}
	if env.Executable == nil {
		env.Executable = os.Executable
	}
	return &rezusctl{env: env}
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// Global flag names.
const (
	flagServer   = "server"
	flagToken    = "token"
	flagInsecure = "insecure-skip-tls-verify"
	flagCA       = "certificate-authority"
	flagContext  = "context"
)

func (r *rezusctl) app() *cli.App {
	app := &cli.App{
		Name:                 "rezusctl",
		Usage:                "drive a RezusCloud management plane: tenants, node groups, machines and more",
		Version:              version,
		HideVersion:          true, // the version command asks the server too
		EnableBashCompletion: true,
		Reader:               r.env.Stdin,
		Writer:               r.env.Stdout,
		ErrWriter:            r.env.Stderr,
		// Errors are printed by run, which also picks the exit code.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError:   usageError,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: flagServer, Usage: "server URL (default: the context's)"},
			&cli.StringFlag{Name: flagToken, Usage: "bearer token (overrides the context's)"},
			&cli.BoolFlag{Name: flagInsecure, Usage: "do not verify the server's certificate (test servers only)"},
			&cli.StringFlag{Name: flagCA, Usage: "PEM `FILE` of the certificate authorities to trust for the server"},
			&cli.StringFlag{Name: flagContext, Usage: "context to use instead of the current one"},
		},
		Commands: []*cli.Command{
			r.getCommand(),
			r.describeCommand(),
			r.createCommand(),
			r.applyCommand(),
			r.diffCommand(),
			r.deleteCommand(),
			r.editCommand(),
			r.eventsCommand(),
			r.auditCommand(),
			r.loginCommand(),
			r.logoutCommand(),
			r.whoamiCommand(),
			r.configCommand(),
			r.automationCommand(),
			r.credentialCommand("kubeconfig", "the tenant's Kubernetes kubeconfig"),
			r.credentialCommand("talosconfig", "the tenant's talosctl config"),
			r.credentialPluginCommand(),
			r.healthCommand(),
			r.versionCommand(),
			r.completionCommand(),
			r.bootCommand(),
			r.upgradeCommand(),
			r.rotateCommand(),
			r.rolloutCommand(),
			r.maintenanceCommand(),
			r.backupCommand(),
			r.restoreCommand(),
			r.logsCommand(),
			r.cancelCommand(),
			r.stateCommand(),
			r.autoscalerCommand(),
		},
	}
	for _, c := range app.Commands {
		setUsageErrors(c)
	}
	return app
}

func setUsageErrors(c *cli.Command) {
	if c.OnUsageError == nil {
		c.OnUsageError = usageError
	}
	for _, s := range c.Subcommands {
		setUsageErrors(s)
	}
}

func usageError(c *cli.Context, err error, _ bool) error {
	name := c.App.Name
	if c.Command != nil && c.Command.FullName() != "" {
		name += " " + c.Command.FullName()
	}
	return fmt.Errorf("%v (see %s --help)", err, name)
}

// run runs one command line and returns the exit code: 0, 1 for errors, 130
// when interrupted.
func (r *rezusctl) run(ctx context.Context, args []string) int {
	app := r.app()
	err := app.RunContext(ctx, normalizeArgs(app, args))
	if err == nil {
		return 0
	}
	return r.report(err)
}

// exitError ends the command with a code after the command printed its own
// explanation (e.g. apply, which reports each failed document).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// report prints err the way a person wants to read it and returns the exit
// code: 1, or the code of a codedError.
func (r *rezusctl) report(err error) int {
	var (
		ee exitError
		ce codedError
		se *statusError
		ne *networkError
	)
	code := 1
	if errors.As(err, &ce) {
		code = ce.code
	}
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, context.Canceled):
		return 130
	case errors.As(err, &se):
		printStatus(r.env.Stderr, se)
	case errors.As(err, &ne):
		fmt.Fprintln(r.env.Stderr, "error:", ne.Error())
	default:
		fmt.Fprintln(r.env.Stderr, "error:", err.Error())
	}
	return code
}

// printStatus prints a server's Status: its message, then each field cause on
// its own line.
func printStatus(w io.Writer, se *statusError) {
	st := se.Status
	reason := st.Reason
	if reason == "" {
		reason = reasonForCode(se.Code)
	}
	fmt.Fprintf(w, "Error from server (%s): %s\n", reason, st.Message)
	if st.Details != nil {
		for _, c := range st.Details.Causes {
			if c.Field != "" {
				fmt.Fprintf(w, "  %s: %s\n", c.Field, c.Message)
			} else {
				fmt.Fprintf(w, "  %s\n", c.Message)
			}
		}
	}
	if reason == domain.ReasonUnauthorized {
		fmt.Fprintln(w, "(log in with `rezusctl login`, or give a token with --token)")
	}
}
