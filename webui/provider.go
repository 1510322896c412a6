package webui

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// providerRoutes serves a provider's page: its settings and, for a module
// provider, its files and what tofu validate said of them.
func (u *UI) providerRoutes(p *pages) {
	p.GET("/settings/providers/:name", u.providerPage)
	p.GET("/live/settings/providers/:name", u.providerLive)
}

// providerFragments are the live parts of a provider's page: its settings
// and validation, and its files (apart, so that a new verdict does not send
// a megabyte of files again unless their marks changed).
func (u *UI) providerFragments(name string) []fragment {
	read := func(c echo.Context) (*domain.Provider, error) {
		p, err := getOf[domain.Provider](u, c.Request(), "/providers/"+name)
		if domain.ReasonOf(err) == domain.ReasonNotFound {
			return nil, &liveEnd{Message: goneMessage("Provider " + name)}
		}
		return p, err
	}
	return []fragment{
		{Event: "provider", Render: func(c echo.Context) (templ.Component, error) {
			p, err := read(c)
			if err != nil {
				return nil, err
			}
			return providerDetails(newProviderView(p)), nil
		}},
		{Event: "provider-files", Render: func(c echo.Context) (templ.Component, error) {
			p, err := read(c)
			if err != nil {
				return nil, err
			}
			return moduleFilesView(newProviderView(p)), nil
		}},
	}
}

func (u *UI) providerPage(c echo.Context) error {
	name := c.Param("name")
	p, err := getOf[domain.Provider](u, c.Request(), "/providers/"+name)
	if err != nil {
		return u.fail(c, err)
	}
	comps, seen, err := renderFragments(c, u.providerFragments(name))
	if err != nil {
		return u.fail(c, err)
	}
	return render(c, http.StatusOK, ProviderPage(u, viewerOf(c), p.Metadata.Name, p.Spec.Type == domain.ProviderModule, comps[0], comps[1], seen))
}

func (u *UI) providerLive(c echo.Context) error {
	name := c.Param("name")
	return u.live(c, []string{domain.SubjectFilter(domain.ProviderKind, "", name)}, u.providerFragments(name)...)
}

// providerView is what a provider's page shows.
type providerView struct {
	P domain.Provider
	// Config is spec.config, indented ("" when none).
	Config string
	// Validated is a module provider's Validated condition (nil before its
	// first check, and for other providers).
	Validated *domain.Condition
	// Stale says the verdict is of an older spec than the provider's.
	Stale bool
	// Diagnostics are the message of a Validated condition that is False:
	// tofu's diagnostics, one per line.
	Diagnostics []moduleDiagnostic
	// Note is the message of one that is not ("tofu validate is running").
	Note string
	// Files are the module's files, highlighted, in name order.
	Files []moduleFileView
}

// moduleDiagnostic is one line of a Validated condition's message: tofu's
// "file:line:col: summary: detail", or any other text (File "").
type moduleDiagnostic struct {
	File         string
	Line, Column int
	Text         string
	// Anchor is the id of the line in the file view; "" when the file or
	// the line is not one of the module's.
	Anchor string
}

// Location is "file:line:col".
func (d moduleDiagnostic) Location() string {
	return d.File + ":" + strconv.Itoa(d.Line) + ":" + strconv.Itoa(d.Column)
}

// moduleFileView is one file of a module, ready to show.
type moduleFileView struct {
	Name  string
	Lines []moduleLine
	// Diagnostics counts the diagnostics about this file.
	Diagnostics int
}

// moduleLine is one line of a file: its number, anchor, spans, and the
// diagnostics pointing at it (their text, for a tooltip).
type moduleLine struct {
	N      int
	ID     string
	Spans  []codeSpan
	Marked []string
}

// diagnosticRe is tofu's location prefix as the validator writes it.
var diagnosticRe = regexp.MustCompile(`^([^:\s]+):(\d+):(\d+): (.*)$`)

// moduleLineID is the element id of a file's line: the module's file names
// are letters, digits and _.- (the domain checks them), so it needs no
// escaping in a URL fragment.
func moduleLineID(file string, line int) string { return "file-" + file + "-L" + strconv.Itoa(line) }

// moduleFileID is the element id of a file's view.
func moduleFileID(file string) string { return "file-" + file }

func newProviderView(p *domain.Provider) providerView {
	v := providerView{P: *p}
	if len(p.Spec.Config) > 0 && string(p.Spec.Config) != "{}" {
		var cfg any
		if json.Unmarshal(p.Spec.Config, &cfg) == nil {
			b, _ := json.MarshalIndent(cfg, "", "  ")
			v.Config = string(b)
		}
	}
	if p.Spec.Type != domain.ProviderModule {
		return v
	}
	v.Validated = domain.FindCondition(p.Status.Conditions, domain.ConditionValidated)
	if v.Validated != nil && v.Validated.ObservedGeneration != 0 && v.Validated.ObservedGeneration < p.Metadata.Generation {
		v.Stale = true
	}
	var files map[string]string
	if p.Spec.Module != nil {
		files = p.Spec.Module.Files
	}
	highlighted := map[string][][]codeSpan{}
	for name, text := range files {
		highlighted[name] = highlightHCL(text)
	}
	marks := map[string]map[int][]string{}
	if v.Validated != nil && v.Validated.Status != "False" {
		v.Note = v.Validated.Message
	}
	if v.Validated != nil && v.Validated.Status == "False" && v.Validated.Message != "" {
		linkTo := highlighted
		if v.Stale {
			linkTo = nil // the lines it names may have moved
		}
		v.Diagnostics = parseModuleDiagnostics(v.Validated.Message, linkTo)
		for _, d := range v.Diagnostics {
			if d.Anchor != "" {
				if marks[d.File] == nil {
					marks[d.File] = map[int][]string{}
				}
				marks[d.File][d.Line] = append(marks[d.File][d.Line], d.Text)
			}
		}
	}
	if p.Spec.Module != nil {
		for _, name := range p.Spec.Module.SortedFiles() {
			fv := moduleFileView{Name: name}
			for i, spans := range highlighted[name] {
				n := i + 1
				m := marks[name][n]
				fv.Diagnostics += len(m)
				fv.Lines = append(fv.Lines, moduleLine{N: n, ID: moduleLineID(name, n), Spans: spans, Marked: m})
			}
			v.Files = append(v.Files, fv)
		}
	}
	return v
}

// parseModuleDiagnostics reads a Validated message, one diagnostic a line;
// a location in one of files (by name, to its lines) gets an anchor.
func parseModuleDiagnostics(msg string, files map[string][][]codeSpan) []moduleDiagnostic {
	var out []moduleDiagnostic
	for _, line := range strings.Split(strings.TrimRight(msg, "\n"), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		m := diagnosticRe.FindStringSubmatch(line)
		if m == nil {
			out = append(out, moduleDiagnostic{Text: line})
			continue
		}
		d := moduleDiagnostic{File: m[1], Text: m[4]}
		d.Line, _ = strconv.Atoi(m[2])
		d.Column, _ = strconv.Atoi(m[3])
		if lines, ok := files[d.File]; ok && d.Line >= 1 && d.Line <= len(lines) {
			d.Anchor = moduleLineID(d.File, d.Line)
		}
		out = append(out, d)
	}
	return out
}

// validatedText says what a Validated condition means, for people.
func validatedText(c *domain.Condition) string {
	switch {
	case c == nil:
		return "Not checked yet: tofu validate runs after every change of the module."
	case c.Status == "True":
		return "tofu validate accepts the module."
	case c.Reason == domain.ReasonModuleInitFailed:
		return "tofu init could not install the module's providers."
	case c.Status == "False":
		return "tofu validate refuses the module."
	}
	return "tofu validate is checking the module."
}

// plural is "1 line" or "3 lines".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
