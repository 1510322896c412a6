package tofu

import (
	_ "embed"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// What readers other than admins get of what tofu said about a module: the
// Provider's Validated condition (readable by every role) and a dry run's
// plan error (returned to the tenant's editors). A module is code, and its
// functions put what they read into tofu's diagnostics: a value quoted, a
// regular expression's error, a check's error_message, a provider's summary.
// Issue 27 redacted the quoted values and the long words that looked like
// encoded data, and a module beat it by spelling a secret in words of four
// characters, and by quoting pieces short enough to be found somewhere in its
// own files (issue 42, finding 4). Any rule that keeps free text beats
// itself the same way: text can be spelled in whatever words a rule keeps.
//
// So what is kept is what tofu says of its own, never what a module computed:
//   - the position (file:line:col) when the file is one of the module's;
//   - the summary when it is one of the constant summaries of OpenTofu and
//     HCL (tofu_summaries.txt), not a provider's or one formatted with values;
//   - the detail only of the few diagnostics tofu makes from the
//     configuration's text alone, before evaluating anything (an unknown
//     argument, an undeclared reference), and only when each name it quotes
//     is a whole word of the module's own files, or a name tofu suggests
//     ("Did you mean ...?", a name of the provider's schema);
//   - a resource address, with its instance keys redacted unless they are
//     numbers or words of the module.
//
// Everything else becomes "(redacted)". What is left is tofu's text chosen by
// which errors a module has; that a module can choose them with what it reads
// is a side channel of a few bits a diagnostic, not a copy (the sandbox keeps
// the server's secrets out of its reach). The full text is not stored: the
// module's author reproduces it with `tofu validate` locally.

// redacted replaces what a reader other than an admin may not read.
const redacted = "(redacted)"

//go:embed tofu_summaries.txt
var summariesText string

// tofuSummaries are tofu's constant summaries, longest first (a summary may
// begin with a shorter one).
var tofuSummaries = func() []string {
	var s []string
	for _, l := range strings.Split(summariesText, "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			s = append(s, l)
		}
	}
	slices.SortFunc(s, func(a, b string) int { return len(b) - len(a) })
	return s
}()

// staticDetails are the details of diagnostics tofu makes from the
// configuration's text: groups named m… are names the module wrote, s… a
// name tofu suggests.
var staticDetails = map[string]*regexp.Regexp{
	"Unsupported argument":                   regexp.MustCompile(`^An argument named "(?P<m>[^"]*)" is not expected here\.(?: Did you mean "(?P<s>[^"]*)"\?)?$`),
	"Unsupported block type":                 regexp.MustCompile(`^Blocks of type "(?P<m>[^"]*)" are not expected here\.(?: Did you mean "(?P<s>[^"]*)"\?)?$`),
	"Missing required argument":              regexp.MustCompile(`^The argument "(?P<s>[^"]*)" is required, but no definition was found\.$`),
	"Unsupported attribute":                  regexp.MustCompile(`^This object has no argument, nested block, or exported attribute named "(?P<m>[^"]*)"\.(?: Did you mean "(?P<s>[^"]*)"\?)?$`),
	"Reference to undeclared resource":       regexp.MustCompile(`^A (?:managed|data) resource "(?P<m1>[^"]*)" "(?P<m2>[^"]*)" has not been declared in (?:the root module|module\.[A-Za-z0-9_.-]+)\.(?: Did you mean "(?P<s>[^"]*)"\?)?$`),
	"Reference to undeclared local value":    regexp.MustCompile(`^A local value with the name "(?P<m>[^"]*)" has not been declared\.(?: Did you mean "(?P<s>[^"]*)"\?)?$`),
	"Reference to undeclared input variable": regexp.MustCompile(`^An input variable with the name "(?P<m>[^"]*)" has not been declared\.(?: Did you mean "(?P<s>[^"]*)"\?| This variable can be declared with a variable "(?P<m2>[^"]*)" \{\} block\.)?$`),
}

var (
	// suggestedName is what tofu suggests: a name of a schema or of the module.
	suggestedName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,63}$`)
	// diagPosition is "file:line:col: ".
	diagPosition = regexp.MustCompile(`^([^\s:]+):[0-9]+:[0-9]+: `)
	// diagAddress is a resource address and ": ", instance keys included.
	diagAddress = regexp.MustCompile(`^((?:[A-Za-z0-9_-]+(?:\[(?:[0-9]+|"(?:[^"\\]|\\.)*")\])?\.)+[A-Za-z0-9_-]+(?:\[(?:[0-9]+|"(?:[^"\\]|\\.)*")\])?): `)
	// instanceKey is a string key of an address.
	instanceKey = regexp.MustCompile(`\["((?:[^"\\]|\\.)*)"\]`)
)

// RedactForReaders is diag as readers other than admins may read it; files
// are the module's (or the configuration's) files by name.
func RedactForReaders(diag string, files map[string]string) string {
	var b strings.Builder
	rest := diag
	for _, p := range []string{"tofu init: ", "tofu plan: ", "tofu validate: "} {
		if s, ok := strings.CutPrefix(rest, p); ok {
			b.WriteString(p)
			rest = s
			break
		}
	}
	if m := diagPosition.FindStringSubmatch(rest); m != nil {
		if _, ok := files[m[1]]; ok {
			b.WriteString(m[0])
		} else {
			b.WriteString(redacted + ": ")
		}
		rest = rest[len(m[0]):]
	}
	if m := diagAddress.FindStringSubmatch(rest); m != nil {
		b.WriteString(redactAddress(m[1], files) + ": ")
		rest = rest[len(m[0]):]
	}
	// tofu init's text: "Error: <summary>" blocks, their details after.
	if strings.HasPrefix(rest, "Error: ") {
		for i, block := range strings.Split(rest, "Error: ")[1:] {
			if i > 0 {
				b.WriteString(" ")
			}
			b.WriteString("Error: " + redactSummaryAndDetail(strings.TrimSpace(block), files))
		}
		return b.String()
	}
	b.WriteString(redactSummaryAndDetail(rest, files))
	return b.String()
}

// redactSummaryAndDetail keeps of "<summary>: <detail>" (or "<summary>
// <detail>", as tofu init prints it) the summary when it is tofu's own and
// the detail when it is static (staticDetails).
func redactSummaryAndDetail(s string, files map[string]string) string {
	for _, sum := range tofuSummaries {
		detail, ok := strings.CutPrefix(s, sum)
		if !ok || detail != "" && !strings.HasPrefix(detail, ":") && !strings.HasPrefix(detail, " ") && !strings.HasPrefix(detail, "\n") {
			continue
		}
		detail = strings.Join(strings.Fields(strings.TrimPrefix(detail, ":")), " ")
		if detail == "" {
			return sum
		}
		if staticDetail(sum, detail, files) {
			return sum + ": " + detail
		}
		if providerSummaries[sum] {
			if named := providersNamed(detail, files); len(named) > 0 {
				return sum + ": " + strings.Join(named, ", ") + ": " + redacted
			}
		}
		return sum + ": " + redacted
	}
	return redacted
}

// staticDetail reports whether detail is the static detail of summary sum,
// each name it quotes the module's or a suggestion.
func staticDetail(sum, detail string, files map[string]string) bool {
	re, ok := staticDetails[sum]
	if !ok {
		return false
	}
	m := re.FindStringSubmatch(detail)
	if m == nil {
		return false
	}
	for i, group := range re.SubexpNames() {
		switch {
		case m[i] == "" || group == "":
		case !suggestedName.MatchString(m[i]):
			return false
		case strings.HasPrefix(group, "m") && !moduleWord(m[i], files):
			return false
		}
	}
	return true
}

// providerSummaries are tofu init's summaries of a provider it could not
// install. Which providers a configuration requires is its text (a
// required_providers source, a resource type), never a value: the ones
// the module names are kept of the detail, so that its author reads which.
var providerSummaries = map[string]bool{
	"Failed to query available provider packages":  true,
	"Failed to resolve provider packages":          true,
	"Failed to install provider":                   true,
	"Failed to install provider from shared cache": true,
}

// providerAddr is a provider's address in tofu's text, its host left out.
var providerAddr = regexp.MustCompile(`(?:[a-z0-9-]+(?:\.[a-z0-9-]+)+/)?([a-z0-9][a-z0-9-]*)/([a-z0-9][a-z0-9-]*)`)

// providersNamed are the providers (namespace/type) detail names whose type
// the module names: a word of its own, or the prefix of a resource type.
func providersNamed(detail string, files map[string]string) []string {
	var named []string
	for _, m := range providerAddr.FindAllStringSubmatch(detail, -1) {
		addr := m[1] + "/" + m[2]
		if slices.Contains(named, addr) {
			continue
		}
		if moduleWord(m[2], files) || moduleWordPrefix(m[2]+"_", files) {
			named = append(named, addr)
		}
	}
	return named
}

// moduleWordPrefix reports whether a word of files begins with p.
func moduleWordPrefix(p string, files map[string]string) bool {
	re := regexp.MustCompile(`(?:^|[^A-Za-z0-9_-])` + regexp.QuoteMeta(p) + `[A-Za-z0-9_-]`)
	for _, text := range files {
		if re.MatchString(text) {
			return true
		}
	}
	return false
}

// redactAddress redacts the instance keys of addr that are not words of the
// module (a for_each over what a function read makes them data).
func redactAddress(addr string, files map[string]string) string {
	return instanceKey.ReplaceAllStringFunc(addr, func(k string) string {
		if w := instanceKey.FindStringSubmatch(k)[1]; suggestedName.MatchString(w) && moduleWord(w, files) {
			return k
		}
		return `["` + redacted + `"]`
	})
}

// moduleWord reports whether w is a whole word of one of files: bounded by
// what a name cannot hold, so that a piece of a longer word is not one.
func moduleWord(w string, files map[string]string) bool {
	if w == "" {
		return false
	}
	re := regexp.MustCompile(`(?:^|[^A-Za-z0-9_-])` + regexp.QuoteMeta(w) + `(?:$|[^A-Za-z0-9_-])`)
	for _, text := range files {
		if re.MatchString(text) {
			return true
		}
	}
	return false
}

// MaxConfigText bounds what ConfigFiles reads.
const MaxConfigText = 8 << 20

// ConfigFiles are the configuration files tofu ran with in dir (its .tf and
// .tf.json files, those of the modules under it too), by their path from
// dir as tofu names them, up to max bytes in all.
func ConfigFiles(dir string, max int) map[string]string {
	files := map[string]string{}
	total := 0
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			if d.Name() == ".terraform" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".tf") && !strings.HasSuffix(p, ".tf.json") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil || total+len(b) > max {
			return nil
		}
		total += len(b)
		rel, _ := filepath.Rel(dir, p)
		files[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	return files
}
