package domain

import (
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode"
)

// strictField is a struct field as encoding/json sees it.
type strictField struct {
	name   string
	index  []int
	typ    reflect.Type
	tagged bool
	quoted bool
}

var strictFieldCache sync.Map // reflect.Type -> map[string]strictField

// strictFields lists the JSON fields of struct type t by name, following
// encoding/json's rules: `json:"-"` and unexported fields are skipped, fields
// of embedded structs are promoted, and of several fields with the same name
// the shallowest wins, a tagged one if tied, none if still tied.
func strictFields(t reflect.Type) map[string]strictField {
	if f, ok := strictFieldCache.Load(t); ok {
		return f.(map[string]strictField)
	}
	var current []strictField
	next := []strictField{{typ: t}}
	var count, nextCount map[reflect.Type]int
	visited := map[reflect.Type]bool{}
	var fields []strictField
	for len(next) > 0 {
		current, next = next, nil
		count, nextCount = nextCount, map[reflect.Type]int{}
		for _, f := range current {
			if visited[f.typ] {
				continue
			}
			visited[f.typ] = true
			for i := range f.typ.NumField() {
				sf := f.typ.Field(i)
				if sf.Anonymous {
					et := sf.Type
					if et.Kind() == reflect.Pointer {
						et = et.Elem()
					}
					if !sf.IsExported() && et.Kind() != reflect.Struct {
						continue
					}
				} else if !sf.IsExported() {
					continue
				}
				tag := sf.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, opts, _ := strings.Cut(tag, ",")
				if !isValidJSONTag(name) {
					name = ""
				}
				index := append(slices.Clone(f.index), i)
				ft := sf.Type
				if ft.Name() == "" && ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if name != "" || !sf.Anonymous || ft.Kind() != reflect.Struct {
					nf := strictField{name: name, index: index, typ: sf.Type, tagged: name != "",
						quoted: slices.Contains(strings.Split(opts, ","), "string")}
					if nf.name == "" {
						nf.name = sf.Name
					}
					fields = append(fields, nf)
					if count[f.typ] > 1 {
						// The same struct embedded twice at one level: its
						// fields clash and must cancel out below.
						fields = append(fields, nf)
					}
					continue
				}
				nextCount[ft]++
				if nextCount[ft] == 1 {
					next = append(next, strictField{name: ft.Name(), index: index, typ: ft})
				}
			}
		}
	}
	sort.SliceStable(fields, func(i, j int) bool {
		a, b := fields[i], fields[j]
		if a.name != b.name {
			return a.name < b.name
		}
		if len(a.index) != len(b.index) {
			return len(a.index) < len(b.index)
		}
		return a.tagged && !b.tagged
	})
	byName := map[string]strictField{}
	for i := 0; i < len(fields); {
		j := i + 1
		for j < len(fields) && fields[j].name == fields[i].name {
			j++
		}
		if j-i == 1 || len(fields[i].index) != len(fields[i+1].index) || fields[i].tagged != fields[i+1].tagged {
			byName[fields[i].name] = fields[i]
		}
		i = j
	}
	f, _ := strictFieldCache.LoadOrStore(t, byName)
	return f.(map[string]strictField)
}

// isValidJSONTag mirrors encoding/json: a tag name it does not accept is
// ignored in favour of the Go field name.
func isValidJSONTag(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}
