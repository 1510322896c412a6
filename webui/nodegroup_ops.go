package webui

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/rezuscloud/rezuscloud/domain"
)

// nodeGroupOpsRoutes serve deleting a node group.
func (u *UI) nodeGroupOpsRoutes(p *pages) {
	p.DELETE("/tenants/:tenant/nodegroups/:name", u.deleteNodeGroup)
}

// deleteNodeGroup asks the API to delete a node group (the next apply
// removes its machines) and answers the fresh table.
func (u *UI) deleteNodeGroup(c echo.Context) error {
	t, name := c.Param("tenant"), c.Param("name")
	if err := u.api.call(c.Request(), apiRequest{Method: http.MethodDelete, Path: "/tenants/" + t + "/nodegroups/" + name}, nil); err != nil {
		return u.fail(c, err)
	}
	if !isHTMX(c) {
		return c.Redirect(http.StatusSeeOther, "/ui/tenants/"+t+"#nodegroups")
	}
	comp, err := u.tenantFragments(t)[1].Render(c)
	if err != nil {
		return u.fail(c, err)
	}
	return render(c, http.StatusOK, comp)
}

// taintString writes taints one a line as key=value:Effect (key:Effect
// without a value), as kubectl taint reads them.
func taintString(ts []domain.Taint) string {
	lines := make([]string, len(ts))
	for i, t := range ts {
		kv := t.Key
		if t.Value != "" {
			kv += "=" + t.Value
		}
		lines[i] = kv + ":" + t.Effect
	}
	return strings.Join(lines, "\n")
}

// parseTaints reads taintString's form; commas separate taints too. The API
// judges keys, values and effects.
func parseTaints(s string) ([]domain.Taint, error) {
	var out []domain.Taint
	for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == ',' }) {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		i := strings.LastIndex(part, ":")
		if i < 0 {
			return nil, fmt.Errorf("%q is not key=value:Effect (e.g. dedicated=gpu:NoSchedule)", part)
		}
		kv, effect := strings.TrimSpace(part[:i]), strings.TrimSpace(part[i+1:])
		k, v, _ := strings.Cut(kv, "=")
		out = append(out, domain.Taint{Key: strings.TrimSpace(k), Value: strings.TrimSpace(v), Effect: effect})
	}
	return out, nil
}

// machinesWord is "1 machine" or "n machines".
func machinesWord(n int) string {
	if n == 1 {
		return "1 machine"
	}
	return fmt.Sprintf("%d machines", n)
}

// schematicFields reads the node group form's extensions (one a line, or
// comma-separated) and extra kernel arguments (white-space separated).
func schematicFields(extensions, kernelArgs string) (exts, args []string) {
	for _, e := range strings.FieldsFunc(extensions, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
		if e = strings.TrimSpace(e); e != "" {
			exts = append(exts, e)
		}
	}
	return exts, strings.Fields(kernelArgs)
}

// schematicOf is the schematic the form declares on top of the group's
// current one (its META and secure-boot choice are kept): nil when it
// declares neither extensions nor kernel arguments and the current one
// holds nothing else, so the group follows its tenant's.
func schematicOf(cur *domain.Schematic, extensions, kernelArgs string) *domain.Schematic {
	exts, args := schematicFields(extensions, kernelArgs)
	next := domain.Schematic{Extensions: exts, ExtraKernelArgs: args}
	if cur != nil {
		next.Meta, next.SecureBoot = cur.Meta, cur.SecureBoot
	}
	if len(next.Extensions) == 0 && len(next.ExtraKernelArgs) == 0 && len(next.Meta) == 0 && !next.SecureBoot {
		return nil
	}
	return &next
}

// schematicStrings writes a schematic into the form's two fields.
func schematicStrings(s *domain.Schematic) (extensions, kernelArgs string) {
	if s == nil {
		return "", ""
	}
	return strings.Join(s.Extensions, "\n"), strings.Join(s.ExtraKernelArgs, " ")
}
