package tfprovider

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/boolplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/mapplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// fieldKind is how an attribute is typed in tofu and in the API's JSON.
type fieldKind int

const (
	fString fieldKind = iota
	fInt
	fBool
	fStringMap
	fStringList
	// fJSON is a sub-object of the API given as a JSON string
	// (jsonencode): equal when the server's holds everything the
	// configuration's does (server-side defaults are not a change).
	fJSON
)

// field maps one attribute to a path in the API object.
type field struct {
	attr string
	path []string
	kind fieldKind
	// required: the configuration must set it.
	required bool
	// defaulted: optional, and the server fills it when left out (read
	// back, and kept while the configuration leaves it out).
	defaulted bool
	// computed: only the server sets it.
	computed bool
	// forceNew: a change replaces the object (the API refuses it on update).
	forceNew  bool
	sensitive bool
	// writeOnly: sent, never answered (a password): the state keeps the
	// configuration's.
	writeOnly bool
	// local: the provider's own setting (wait_for), never sent nor read:
	// the state keeps the configuration's.
	local bool
	// canon makes equal strings equal ("1.13.0" and "v1.13.0").
	canon func(string) string
	desc  string
}

// schemaAttribute is the field's attribute in a resource schema.
func (f field) schemaAttribute() schema.Attribute {
	optional := !f.required && !f.computed
	computed := f.defaulted || f.computed
	switch f.kind {
	case fInt:
		var pm []planmodifier.Int64
		if f.forceNew {
			pm = append(pm, int64planmodifier.RequiresReplace())
		}
		if computed {
			pm = append(pm, int64planmodifier.UseStateForUnknown())
		}
		return schema.Int64Attribute{Required: f.required, Optional: optional, Computed: computed, Sensitive: f.sensitive, Description: f.desc, PlanModifiers: pm}
	case fBool:
		var pm []planmodifier.Bool
		if f.forceNew {
			pm = append(pm, boolplanmodifier.RequiresReplace())
		}
		if computed {
			pm = append(pm, boolplanmodifier.UseStateForUnknown())
		}
		return schema.BoolAttribute{Required: f.required, Optional: optional, Computed: computed, Sensitive: f.sensitive, Description: f.desc, PlanModifiers: pm}
	case fStringMap:
		var pm []planmodifier.Map
		if f.forceNew {
			pm = append(pm, mapplanmodifier.RequiresReplace())
		}
		if computed {
			pm = append(pm, mapplanmodifier.UseStateForUnknown())
		}
		return schema.MapAttribute{ElementType: types.StringType, Required: f.required, Optional: optional, Computed: computed, Sensitive: f.sensitive, Description: f.desc, PlanModifiers: pm}
	case fStringList:
		var pm []planmodifier.List
		if f.forceNew {
			pm = append(pm, listplanmodifier.RequiresReplace())
		}
		if computed {
			pm = append(pm, listplanmodifier.UseStateForUnknown())
		}
		return schema.ListAttribute{ElementType: types.StringType, Required: f.required, Optional: optional, Computed: computed, Sensitive: f.sensitive, Description: f.desc, PlanModifiers: pm}
	}
	var pm []planmodifier.String
	if f.forceNew {
		pm = append(pm, stringplanmodifier.RequiresReplace())
	}
	if computed {
		pm = append(pm, stringplanmodifier.UseStateForUnknown())
	}
	return schema.StringAttribute{Required: f.required, Optional: optional, Computed: computed, Sensitive: f.sensitive, Description: f.desc, PlanModifiers: pm}
}

// getter is a plan, a state or a configuration.
type getter interface {
	GetAttribute(ctx context.Context, p path.Path, target any) diag.Diagnostics
}

// value reads the field's attribute from src.
func (f field) value(ctx context.Context, src getter, diags *diag.Diagnostics) attr.Value {
	var v attr.Value
	switch f.kind {
	case fInt:
		var x types.Int64
		diags.Append(src.GetAttribute(ctx, path.Root(f.attr), &x)...)
		v = x
	case fBool:
		var x types.Bool
		diags.Append(src.GetAttribute(ctx, path.Root(f.attr), &x)...)
		v = x
	case fStringMap:
		var x types.Map
		diags.Append(src.GetAttribute(ctx, path.Root(f.attr), &x)...)
		v = x
	case fStringList:
		var x types.List
		diags.Append(src.GetAttribute(ctx, path.Root(f.attr), &x)...)
		v = x
	default:
		var x types.String
		diags.Append(src.GetAttribute(ctx, path.Root(f.attr), &x)...)
		v = x
	}
	return v
}

// toAPI is the JSON of a known, non-null attribute value; ok is false for
// null and unknown (left out: the server keeps or defaults it).
func (f field) toAPI(v attr.Value) (out any, ok bool, err error) {
	if v == nil || v.IsNull() || v.IsUnknown() {
		return nil, false, nil
	}
	switch x := v.(type) {
	case types.Int64:
		return x.ValueInt64(), true, nil
	case types.Bool:
		return x.ValueBool(), true, nil
	case types.Map:
		m := map[string]any{}
		for k, e := range x.Elements() {
			s, _ := e.(types.String)
			m[k] = s.ValueString()
		}
		return m, true, nil
	case types.List:
		l := []any{}
		for _, e := range x.Elements() {
			s, _ := e.(types.String)
			l = append(l, s.ValueString())
		}
		return l, true, nil
	case types.String:
		if f.kind != fJSON {
			return x.ValueString(), true, nil
		}
		var doc any
		d := json.NewDecoder(strings.NewReader(x.ValueString()))
		d.UseNumber()
		if err := d.Decode(&doc); err != nil {
			return nil, false, fmt.Errorf("not JSON: %v (write it with jsonencode)", err)
		}
		return doc, true, nil
	}
	return nil, false, fmt.Errorf("attribute %s: unexpected value type %T", f.attr, v)
}

// fromAPI is the attribute value of the object's JSON at the field's path
// (raw, found), given prior (the plan's or the state's value): a value
// equal to prior in the field's sense keeps prior, so a plan after an
// apply shows no change.
func (f field) fromAPI(raw any, found bool, prior attr.Value) attr.Value {
	if f.writeOnly || f.local {
		return prior
	}
	priorKnown := prior != nil && !prior.IsNull() && !prior.IsUnknown()
	switch f.kind {
	case fInt:
		if !found || raw == nil {
			return types.Int64Null()
		}
		n, err := strconv.ParseInt(fmt.Sprint(raw), 10, 64)
		if err != nil {
			return types.Int64Null()
		}
		return types.Int64Value(n)
	case fBool:
		b, ok := raw.(bool)
		if !found || !ok {
			return types.BoolNull()
		}
		return types.BoolValue(b)
	case fStringMap:
		m, _ := raw.(map[string]any)
		if len(m) == 0 {
			if priorKnown {
				return types.MapValueMust(types.StringType, map[string]attr.Value{})
			}
			return types.MapNull(types.StringType)
		}
		el := map[string]attr.Value{}
		for k, e := range m {
			el[k] = types.StringValue(fmt.Sprint(e))
		}
		return types.MapValueMust(types.StringType, el)
	case fStringList:
		l, _ := raw.([]any)
		if len(l) == 0 {
			if priorKnown {
				return types.ListValueMust(types.StringType, []attr.Value{})
			}
			return types.ListNull(types.StringType)
		}
		el := make([]attr.Value, 0, len(l))
		for _, e := range l {
			el = append(el, types.StringValue(fmt.Sprint(e)))
		}
		return types.ListValueMust(types.StringType, el)
	case fJSON:
		if !found || raw == nil {
			return types.StringNull()
		}
		if priorKnown {
			var p any
			d := json.NewDecoder(strings.NewReader(prior.(types.String).ValueString()))
			d.UseNumber()
			if d.Decode(&p) == nil && jsonCovers(raw, p) {
				return prior
			}
		}
		b, _ := json.Marshal(raw)
		return types.StringValue(string(b))
	}
	s, ok := raw.(string)
	if !found || !ok {
		if raw != nil && found {
			s = fmt.Sprint(raw)
		} else {
			return types.StringNull()
		}
	}
	if priorKnown && f.canon != nil {
		if p := prior.(types.String).ValueString(); f.canon(p) == f.canon(s) {
			return prior
		}
	}
	return types.StringValue(s)
}

// jsonCovers says whether have holds everything want does (objects
// recursively, with keys want has not left to the server; lists and
// scalars equal).
func jsonCovers(have, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			return false
		}
		for _, k := range slices.Sorted(maps.Keys(w)) {
			if !jsonCovers(h[k], w[k]) {
				return false
			}
		}
		return true
	case []any:
		h, ok := have.([]any)
		if !ok || len(h) != len(w) {
			return false
		}
		for i := range w {
			if !jsonCovers(h[i], w[i]) {
				return false
			}
		}
		return true
	case json.Number:
		h, ok := have.(json.Number)
		return ok && h.String() == w.String()
	case nil:
		return have == nil
	}
	return reflect.DeepEqual(have, want)
}

// lookup is the value at p in o.
func lookup(o object, p []string) (any, bool) {
	var cur any = o
	for _, k := range p {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// put sets the value at p in o, making the maps on the way.
func put(o object, p []string, v any) {
	m := o
	for _, k := range p[:len(p)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[p[len(p)-1]] = v
}

// remove deletes the value at p in o.
func remove(o object, p []string) {
	m := o
	for _, k := range p[:len(p)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			return
		}
		m = next
	}
	delete(m, p[len(p)-1])
}
