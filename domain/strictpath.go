package domain

import (
	"reflect"
	"strconv"
	"strings"
)

// strictErrorPath turns the path of a sigs.k8s.io/json strict error, which
// joins struct fields and map keys with "." and writes indexes as "[i]", into
// a path under base. A map key runs up to the next segment its value type
// can take, so that a label key like "app.kubernetes.io/name" stays whole.
func strictErrorPath(base string, t reflect.Type, p string) string {
	segs := strings.Split(strings.TrimPrefix(strings.NewReplacer("[", ".", "]", "").Replace(p), "."), ".")
	path := base
	for i := 0; i < len(segs); i++ {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Struct:
			if f, ok := strictFields(t)[segs[i]]; ok {
				path, t = joinPath(path, segs[i]), f.typ
				continue
			}
		case reflect.Slice, reflect.Array:
			if _, err := strconv.Atoi(segs[i]); err == nil {
				path, t = path+"["+segs[i]+"]", t.Elem()
				continue
			}
		case reflect.Map:
			j := i + 1
			for j < len(segs) && !startsStep(t.Elem(), segs[j]) {
				j++
			}
			path, t, i = path+"["+strings.Join(segs[i:j], ".")+"]", t.Elem(), j-1
			continue
		}
		return joinPath(path, strings.Join(segs[i:], "."))
	}
	return path
}

// startsStep reports whether seg can be the first segment of a path inside a
// value of type t.
func startsStep(t reflect.Type, seg string) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		_, ok := strictFields(t)[seg]
		return ok
	case reflect.Slice, reflect.Array:
		_, err := strconv.Atoi(seg)
		return err == nil
	case reflect.Map, reflect.Interface:
		return true
	}
	return false
}

// typeErrorPath turns UnmarshalTypeError.Field, which is relative to the
// decoded type t, into a path under base. With Go 1.26's encoding/json Field
// holds the JSON names of the struct fields on the way, dot-separated, but
// leaves out slice indexes and map keys, and names an embedded struct by its
// Go name before a promoted field ("Emb.inner" for "inner"). With
// GOEXPERIMENT=jsonv2 it includes indexes and keys as plain segments
// ("taints.2.effect"). The type tells which reading applies; an index or key
// that is missing is written "[*]" ("spec.taints[*].effect"): some element.
func typeErrorPath(base string, t reflect.Type, field string) string {
	if field == "" {
		return base
	}
	path := base
	segs := strings.Split(field, ".")
	for i := 0; i < len(segs); i++ {
		seg := segs[i]
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Struct:
			if f, ok := strictFields(t)[seg]; ok {
				path, t = joinPath(path, seg), f.typ
				continue
			}
			if sf, ok := t.FieldByName(seg); ok && sf.Anonymous {
				t = sf.Type
				continue
			}
		case reflect.Slice, reflect.Array:
			if n, err := strconv.Atoi(seg); err == nil && n >= 0 {
				path, t = path+"["+seg+"]", t.Elem()
				continue
			}
			if hasJSONStep(t.Elem(), seg, 0) {
				path, t, i = path+"[*]", t.Elem(), i-1
				continue
			}
		case reflect.Map:
			if !hasJSONStep(t.Elem(), seg, 0) {
				path, t = path+"["+seg+"]", t.Elem()
				continue
			}
			path, t, i = path+"[*]", t.Elem(), i-1
			continue
		}
		// Past what the type explains: keep the rest as it is.
		return joinPath(path, strings.Join(segs[i:], "."))
	}
	return path
}

// hasJSONStep reports whether seg can be the next segment of a type error
// path inside t without a map key or index in between. depth bounds the
// search, since types like `type L []L` never end.
func hasJSONStep(t reflect.Type, seg string, depth int) bool {
	if depth > 32 {
		return false
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		if _, ok := strictFields(t)[seg]; ok {
			return true
		}
		sf, ok := t.FieldByName(seg)
		return ok && sf.Anonymous
	case reflect.Slice, reflect.Array, reflect.Map:
		return hasJSONStep(t.Elem(), seg, depth+1)
	}
	return false
}
