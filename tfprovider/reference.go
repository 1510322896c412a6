package tfprovider

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	dschema "github.com/hashicorp/terraform-plugin-framework/datasource/schema"
)

// Reference is the Markdown reference of every resource and data source
// docs/terraform.md holds (TestReferenceIsCurrent keeps it current).
func Reference() string {
	var b strings.Builder
	b.WriteString("## Resources\n")
	for _, k := range kinds {
		fmt.Fprintf(&b, "\n### `rezuscloud_%s`\n\n%s\n\n", k.typeName, k.desc)
		api := "/api/v1/" + k.plural + "/{name}"
		if k.tenantScoped {
			api = "/api/v1/tenants/{tenant}/" + k.plural + "/{name}"
		}
		fmt.Fprintf(&b, "API: `%s`. Import: `tofu import rezuscloud_%s.NAME %s`.\n\n", api, k.typeName, importID(k))
		b.WriteString("| attribute | type | | API field | description |\n|---|---|---|---|---|\n")
		for _, f := range k.allFields() {
			apiField := strings.Join(f.path, ".")
			if f.local {
				apiField = "(the provider's)"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | `%s` | %s |\n", f.attr, kindWords(f.kind), fieldWords(f), apiField, escapeCell(f.desc))
		}
	}
	b.WriteString("\n## Data sources\n")
	for _, mk := range dataSources() {
		d := mk().(*dataSource)
		var resp datasource.SchemaResponse
		d.Schema(context.Background(), datasource.SchemaRequest{}, &resp)
		fmt.Fprintf(&b, "\n### `rezuscloud_%s`\n\n%s\n\n| attribute | | description |\n|---|---|---|\n", d.typeName, resp.Schema.Description)
		names := make([]string, 0, len(resp.Schema.Attributes))
		for n := range resp.Schema.Attributes {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			a := resp.Schema.Attributes[n]
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", n, dataWords(a), escapeCell(a.GetDescription()))
		}
	}
	return b.String()
}

func importID(k *kindSpec) string {
	if k.tenantScoped {
		return "TENANT/NAME"
	}
	return "NAME"
}

func kindWords(k fieldKind) string {
	return map[fieldKind]string{fString: "string", fInt: "number", fBool: "bool", fStringMap: "map(string)", fStringList: "list(string)", fJSON: "string (JSON)"}[k]
}

func fieldWords(f field) string {
	var w []string
	switch {
	case f.required:
		w = append(w, "required")
	case f.computed:
		w = append(w, "read-only")
	case f.defaulted:
		w = append(w, "optional, server default")
	default:
		w = append(w, "optional")
	}
	if f.forceNew {
		w = append(w, "replaces")
	}
	if f.sensitive {
		w = append(w, "sensitive")
	}
	if f.writeOnly && !f.computed {
		w = append(w, "never read back")
	}
	return strings.Join(w, ", ")
}

func dataWords(a dschema.Attribute) string {
	var w []string
	switch {
	case a.IsRequired():
		w = append(w, "required")
	case a.IsOptional():
		w = append(w, "optional")
	default:
		w = append(w, "read-only")
	}
	if a.IsSensitive() {
		w = append(w, "sensitive")
	}
	return strings.Join(w, ", ")
}

func escapeCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
