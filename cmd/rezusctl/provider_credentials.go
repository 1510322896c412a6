package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/domain"
)

// Provider credentials are the environment variables tofu gets for a
// Provider whose spec.credentialsRef names them (OS_PASSWORD, …). The API
// (admins only) has PUT, GET and DELETE /api/v1/credentials/{name}; GET
// answers the variable names, never the values, and there is no list route.

// credentialsAnswer is the API's view of provider credentials.
type credentialsAnswer struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Keys []string `json:"keys"`
}

// createCredentialCommand is `create credential NAME`.
func (r *rezusctl) createCredentialCommand() *cli.Command {
	return &cli.Command{
		Name:      "credential",
		Aliases:   []string{"credentials"},
		Usage:     "store provider credentials: environment variables tofu gets for Providers naming them (admins)",
		ArgsUsage: "NAME",
		Description: "The values are sent to the server once and never shown again (get credentials shows the\n" +
			"names only). An env file has KEY=VALUE lines; blank lines and lines starting with # are skipped,\n" +
			"and a value is taken as written (no quotes removed, no variables expanded). Existing credentials\n" +
			"are replaced only with --overwrite. A Provider uses them with spec.credentialsRef.name: NAME.\n\n" +
			"  rezusctl create credential openstack-lab --from-literal OS_USERNAME=ci --from-literal OS_PASSWORD=\"$PW\"\n" +
			"  rezusctl create credential oci-prod --from-env-file oci.env",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "from-literal", Usage: "a `KEY=VALUE` (repeatable)"},
			&cli.StringSliceFlag{Name: "from-env-file", Usage: "a `FILE` of KEY=VALUE lines, or - for stdin (repeatable)"},
			&cli.BoolFlag{Name: "overwrite", Usage: "replace the credentials when NAME exists"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return errors.New("give the credentials' NAME: rezusctl create credential NAME --from-literal KEY=VALUE")
			}
			name := c.Args().First()
			data, err := credentialData(c.StringSlice("from-literal"), c.StringSlice("from-env-file"), r.env.Stdin)
			if err != nil {
				return err
			}
			_, cl, err := r.connect(c)
			if err != nil {
				return err
			}
			path := "/api/v1/credentials/" + name
			if !c.Bool("overwrite") {
				err := cl.call(c.Context, request{method: http.MethodGet, path: path}, nil)
				switch {
				case err == nil:
					return fmt.Errorf("credentials %q exist: give --overwrite to replace them", name)
				case !isNotFound(err):
					return err
				}
			}
			body, err := json.Marshal(map[string]any{"data": data})
			if err != nil {
				return err
			}
			resp, err := cl.do(c.Context, request{method: http.MethodPut, path: path, body: body})
			if err != nil {
				return err
			}
			resp.Body.Close()
			verb := "replaced"
			if resp.StatusCode == http.StatusCreated {
				verb = "created"
			}
			keys := make([]string, 0, len(data))
			for k := range data {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			fmt.Fprintf(r.env.Stdout, "credential/%s %s (%s)\n", name, verb, strings.Join(keys, ", "))
			return nil
		},
	}
}

// credentialData gathers the variables of --from-literal and --from-env-file;
// a key given twice is an error rather than a silent choice.
func credentialData(literals, files []string, stdin io.Reader) (map[string]string, error) {
	if len(literals) == 0 && len(files) == 0 {
		return nil, errors.New("give the variables with --from-literal KEY=VALUE or --from-env-file FILE")
	}
	data := map[string]string{}
	add := func(kv, where string) error {
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return fmt.Errorf("%s: %q is not KEY=VALUE", where, kv)
		}
		if _, dup := data[k]; dup {
			return fmt.Errorf("%s: %s is given twice", where, k)
		}
		data[k] = v
		return nil
	}
	for _, l := range literals {
		if err := add(l, "--from-literal"); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		var b []byte
		var err error
		if f == "-" {
			b, err = io.ReadAll(stdin)
		} else {
			b, err = os.ReadFile(f)
		}
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSuffix(sc.Text(), "\r")
			if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "#") {
				continue
			}
			if err := add(strings.TrimPrefix(strings.TrimLeft(line, " \t"), "export "), fmt.Sprintf("%s:%d", f, n)); err != nil {
				return nil, err
			}
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("reading %s: %w", f, err)
		}
	}
	return data, nil
}

// isCredentialsKind reports whether get's KIND argument names provider credentials.
func isCredentialsKind(s string) bool {
	switch strings.ToLower(s) {
	case "credential", "credentials", "cred", "creds":
		return true
	}
	return false
}

// getCredentials is `get credentials [NAME]`: names and variable names, never
// values. The API has no list of credentials, so without a NAME it shows the
// credentials the Providers name (spec.credentialsRef), with those Providers;
// ones no Provider names are reached by NAME.
func (r *rezusctl) getCredentials(c *cli.Context) error {
	if c.NArg() > 2 {
		return errors.New("give credentials [NAME]")
	}
	if o := c.String("output"); o != outTable && o != outWide && o != outJSON {
		return fmt.Errorf("credentials are shown as a table or json, not %q", o)
	}
	_, cl, err := r.connect(c)
	if err != nil {
		return err
	}
	users := map[string][]string{} // credentials name -> providers naming it
	var names []string
	if name := c.Args().Get(1); name != "" {
		names = []string{name}
	} else {
		pk, err := resolveKind("providers")
		if err != nil {
			return err
		}
		providers, _, err := listAll(c.Context, cl, pk, "", "", 500)
		if err != nil {
			return err
		}
		for _, it := range providers {
			var spec domain.ProviderSpec
			if json.Unmarshal(it.Obj.Spec, &spec) != nil || spec.CredentialsRef == nil || spec.CredentialsRef.Name == "" {
				continue
			}
			n := spec.CredentialsRef.Name
			if users[n] == nil {
				names = append(names, n)
			}
			users[n] = append(users[n], it.Obj.Metadata.Name)
		}
		sort.Strings(names)
	}
	type row struct {
		Name      string   `json:"name"`
		Keys      []string `json:"keys"`
		Providers []string `json:"providers,omitempty"`
		Missing   bool     `json:"missing,omitempty"`
	}
	var rows []row
	for _, n := range names {
		var ans credentialsAnswer
		err := cl.call(c.Context, request{method: http.MethodGet, path: "/api/v1/credentials/" + n}, &ans)
		switch {
		case err == nil:
			rows = append(rows, row{Name: n, Keys: ans.Keys, Providers: users[n]})
		case isNotFound(err) && c.NArg() < 2:
			rows = append(rows, row{Name: n, Providers: users[n], Missing: true})
		default:
			return err
		}
	}
	if c.String("output") == outJSON {
		b, err := json.MarshalIndent(map[string]any{"kind": "ProviderCredentialsList", "items": rows}, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(r.env.Stdout, "%s\n", b)
		return err
	}
	if len(rows) == 0 {
		fmt.Fprintln(r.env.Stderr, "no provider names credentials (get one by name: rezusctl get credentials NAME)")
		return nil
	}
	out := [][]string{{"NAME", "KEYS", "PROVIDERS"}}
	for _, rw := range rows {
		keys := strings.Join(rw.Keys, ",")
		if rw.Missing {
			keys = "<missing>"
		}
		out = append(out, []string{rw.Name, orNone(keys), orNone(strings.Join(rw.Providers, ","))})
	}
	return (&table{w: r.env.Stdout}).write(out)
}
