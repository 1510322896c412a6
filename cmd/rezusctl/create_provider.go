package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"
	"go.yaml.in/yaml/v3"

	"github.com/rezuscloud/rezuscloud/domain"
)

// createProviderCommand builds a Provider from flags, kubectl create
// secret style, so that a module provider's files need not be pasted into
// a manifest by hand.
func (r *rezusctl) createProviderCommand() *cli.Command {
	return &cli.Command{
		Name:      "provider",
		Aliases:   []string{"pv"},
		Usage:     "create a provider from flags; a module provider from a directory of .tf files",
		ArgsUsage: "NAME",
		Description: "--from-dir reads the directory's .tf and .tf.json files (not its subdirectories) into\n" +
			"spec.module.files, and implies --type module. Other files (a README, terraform.tfvars) are\n" +
			"skipped with a note on stderr; hidden ones (.terraform/, .terraform.lock.hcl) silently.\n" +
			"--config sets one spec.config value as a string; --config-file reads a JSON or YAML object\n" +
			"(for numbers, lists and objects), which --config values override. --dry-run prints the\n" +
			"Provider as YAML instead of creating it: a manifest for rezusctl apply -f.\n\n" +
			"  rezusctl create provider emu --type emulated --config endpoint=http://127.0.0.1:8089\n" +
			"  rezusctl create provider lab --from-dir ./mymodule --config emulator=http://127.0.0.1:8089\n" +
			"  rezusctl create provider os --type openstack --config-file os.yaml --credentials os-prod\n" +
			"  rezusctl create provider os --type openstack --kubernetes-versions v1.35.4,v1.36.1\n" +
			"  rezusctl create provider lab --from-dir ./mymodule --dry-run > provider.yaml",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "type", Usage: strings.Join(domain.ProviderTypes(), ", ") + " (default: module with --from-dir)"},
			&cli.StringFlag{Name: "from-dir", Usage: "`DIR` holding the module's .tf and .tf.json files"},
			&cli.StringSliceFlag{Name: "config", Usage: "a spec.config value, `KEY=VALUE` (a string); repeatable"},
			&cli.StringFlag{Name: "config-file", Usage: "`FILE` holding spec.config as a JSON or YAML object"},
			&cli.StringFlag{Name: "credentials", Usage: "name of the stored `SECRET` with the provider's credentials (spec.credentialsRef)"},
			&cli.StringSliceFlag{Name: "kubernetes-versions", Usage: "the only Kubernetes `VERSIONS` its machines run, comma-separated (spec.versions.kubernetes; default: any)"},
			&cli.StringSliceFlag{Name: "talos-versions", Usage: "the only Talos `VERSIONS` its machines run, comma-separated (spec.versions.talos; default: any)"},
			&cli.BoolFlag{Name: "dry-run", Usage: "print the Provider as YAML; create nothing"},
		},
		Action: r.createProvider,
	}
}

// providerManifest is a Provider as create provider writes it: the fields a
// manifest has, in the order the API documents them.
type providerManifest struct {
	APIVersion string               `json:"apiVersion"`
	Kind       string               `json:"kind"`
	Metadata   providerManifestMeta `json:"metadata"`
	Spec       domain.ProviderSpec  `json:"spec"`
}

type providerManifestMeta struct {
	Name string `json:"name"`
}

func (r *rezusctl) createProvider(c *cli.Context) error {
	if c.NArg() != 1 {
		return errors.New("give the provider's name: rezusctl create provider NAME --type TYPE (or --from-dir DIR)")
	}
	p, err := r.providerFromFlags(c)
	if err != nil {
		return err
	}
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if c.Bool("dry-run") {
		return r.printYAML(body)
	}
	_, cl, err := r.connect(c)
	if err != nil {
		return err
	}
	k, _ := resolveKind(domain.ProviderKind.Kind)
	if err := cl.call(c.Context, request{method: http.MethodPost, path: k.collectionPath(""), body: body}, nil); err != nil {
		var se *statusError
		if dir := c.String("from-dir"); dir != "" && errors.As(err, &se) {
			printStatus(r.env.Stderr, moduleCausesAt(se, dir))
			return exitError{code: 1}
		}
		return err
	}
	fmt.Fprintf(r.env.Stdout, "%s/%s created\n", k.Singular, p.Metadata.Name)
	if p.Spec.Type == domain.ProviderModule {
		fmt.Fprintf(r.env.Stderr, "tofu validates the module in the background: rezusctl get provider %s shows the outcome (VALIDATED), describe its diagnostics\n", p.Metadata.Name)
	}
	return nil
}

// providerFromFlags builds the Provider the flags describe. The server
// validates it; only what would be lost or misread on the way (files that
// are not text, a directory too large to send) is refused here.
func (r *rezusctl) providerFromFlags(c *cli.Context) (*providerManifest, error) {
	p := &providerManifest{APIVersion: domain.APIVersion, Kind: domain.ProviderKind.Kind, Metadata: providerManifestMeta{Name: c.Args().First()}}
	p.Spec.Type = c.String("type")
	dir := c.String("from-dir")
	switch {
	case dir != "" && p.Spec.Type == "":
		p.Spec.Type = domain.ProviderModule
	case dir != "" && p.Spec.Type != domain.ProviderModule:
		return nil, fmt.Errorf("--from-dir gives a module provider's files: it goes with --type %s, not %s", domain.ProviderModule, p.Spec.Type)
	case dir == "" && p.Spec.Type == domain.ProviderModule:
		return nil, errors.New("a module provider needs its module: give --from-dir DIR")
	case p.Spec.Type == "":
		return nil, fmt.Errorf("give the provider's --type (%s), or --from-dir DIR for a module provider", strings.Join(domain.ProviderTypes(), ", "))
	}
	if dir != "" {
		files, err := readModuleDir(dir, r.env.Stderr)
		if err != nil {
			return nil, err
		}
		p.Spec.Module = &domain.ModuleSource{Files: files}
	}
	cfg, err := configFromFlags(c.String("config-file"), c.StringSlice("config"))
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		if p.Spec.Config, err = json.Marshal(cfg); err != nil {
			return nil, err
		}
	}
	if s := c.String("credentials"); s != "" {
		p.Spec.CredentialsRef = &domain.SecretRef{Name: s}
	}
	if k, t := c.StringSlice("kubernetes-versions"), c.StringSlice("talos-versions"); len(k) > 0 || len(t) > 0 {
		p.Spec.Versions = &domain.ProviderVersions{Kubernetes: k, Talos: t}
	}
	return p, nil
}

// isModuleFile reports whether OpenTofu reads a file of a module directory.
func isModuleFile(name string) bool {
	return strings.HasSuffix(name, ".tf") || strings.HasSuffix(name, ".tf.json")
}

// readModuleDir reads a module's files: the .tf and .tf.json files of dir,
// not its subdirectories (a module provider's module is one directory).
// Every other entry is skipped with a note on notes, except hidden ones
// (.terraform/, .terraform.lock.hcl), which tofu itself makes there.
func readModuleDir(dir string, notes io.Writer) (map[string]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	files := map[string]string{}
	total := 0
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(dir, name)
		if strings.HasPrefix(name, ".") {
			continue
		}
		st, err := os.Stat(path) // through symlinks
		if err != nil {
			return nil, err
		}
		switch {
		case st.IsDir():
			fmt.Fprintf(notes, "skipping %s: a directory (a module provider's module is one directory; subdirectories are not sent)\n", path)
			continue
		case !isModuleFile(name):
			fmt.Fprintf(notes, "skipping %s: not a .tf or .tf.json file\n", path)
			continue
		}
		if len(files) == domain.MaxModuleFiles {
			return nil, fmt.Errorf("%s holds more than %d .tf and .tf.json files, the most a module provider may have", dir, domain.MaxModuleFiles)
		}
		if total += int(st.Size()); total > domain.MaxModuleBytes {
			return nil, fmt.Errorf("the .tf and .tf.json files of %s total more than %d bytes, the most a module provider may have", dir, domain.MaxModuleBytes)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		if !utf8.Valid(b) {
			// JSON would carry it with U+FFFD in place of the bad bytes.
			return nil, fmt.Errorf("%s is not UTF-8 text", path)
		}
		files[name] = string(b)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s holds no .tf or .tf.json files", dir)
	}
	return files, nil
}

// configFromFlags is spec.config: the object in file (JSON or YAML), with
// each KEY=VALUE of pairs set over it as a string; nil when neither is given.
func configFromFlags(file string, pairs []string) (map[string]any, error) {
	var cfg map[string]any
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		var v any
		if err := yaml.Unmarshal(b, &v); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if v, err = jsonCompatible(v); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		var ok bool
		if cfg, ok = v.(map[string]any); !ok {
			return nil, fmt.Errorf("%s does not hold an object of settings", file)
		}
	}
	for _, kv := range pairs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--config %q is not KEY=VALUE", kv)
		}
		if cfg == nil {
			cfg = map[string]any{}
		}
		cfg[k] = v
	}
	return cfg, nil
}

// moduleFileCause is a cause's field naming one module file.
var moduleFileCause = regexp.MustCompile(`^spec\.module\.files\[(.+)\]$`)

// lineCol is the line:column a module file's cause message starts with.
var lineCol = regexp.MustCompile(`^\d+:\d+: `)

// moduleCausesAt rewrites the causes about module files as compiler-style
// locations in the directory they were read from (dir/main.tf:3:5: ...), so
// that an editor or terminal can jump to them.
func moduleCausesAt(se *statusError, dir string) *statusError {
	if se.Status.Details == nil {
		return se
	}
	out := *se
	d := *se.Status.Details
	d.Causes = append([]domain.Cause(nil), d.Causes...)
	for i, c := range d.Causes {
		m := moduleFileCause.FindStringSubmatch(c.Field)
		if m == nil {
			continue
		}
		sep := ": "
		if lineCol.MatchString(c.Message) {
			sep = ":"
		}
		d.Causes[i].Field, d.Causes[i].Message = "", filepath.Join(dir, m[1])+sep+c.Message
	}
	out.Status.Details = &d
	return &out
}

// summarizeModuleFiles replaces, in a Provider's spec, each module file's
// text with its size, for describe: the files can run to a megabyte, and
// get -o yaml shows them whole.
func summarizeModuleFiles(spec *yaml.Node) {
	files := mappingValue(mappingValue(spec, "module"), "files")
	if files == nil || files.Kind != yaml.MappingNode {
		return
	}
	for i := 1; i < len(files.Content); i += 2 {
		text := files.Content[i].Value
		lines := strings.Count(text, "\n")
		if text != "" && !strings.HasSuffix(text, "\n") {
			lines++
		}
		unit := "lines"
		if lines == 1 {
			unit = "line"
		}
		files.Content[i] = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str",
			Value: fmt.Sprintf("%d %s, %s", lines, unit, humanBytes(int64(len(text))))}
	}
}

// mappingValue is the value of key in a YAML mapping; nil when n is not a
// mapping or lacks the key.
func mappingValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// providerValidatedCell is a module provider's Validated condition: True,
// or the status with its reason (False (Invalid), Unknown (Pending)); empty
// for other providers and before the first check.
func providerValidatedCell(o *domain.Object, _ time.Time) string {
	var st domain.ProviderStatus
	if len(o.Status) == 0 || json.Unmarshal(o.Status, &st) != nil {
		return ""
	}
	c := domain.FindCondition(st.Conditions, domain.ConditionValidated)
	switch {
	case c == nil:
		return ""
	case c.Status == "True" || c.Reason == "":
		return c.Status
	}
	return c.Status + " (" + c.Reason + ")"
}
