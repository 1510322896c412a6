package providers

import (
	"encoding/json"
	"reflect"
	"strings"

	"github.com/rezuscloud/rezuscloud/domain"
)

// GroupConfigFields describes the providerConfig keys of provider type typ,
// in the order its struct declares them (the shared install keys last), for
// forms: read from the struct's json tags, required being what its
// validation refuses as missing in an empty config. Keys of lists of
// objects (a metal group's machines) are left out: a form cannot offer them
// as one field. It returns nil for a type with free-form config (module) or
// an unknown one.
func GroupConfigFields(typ string) []domain.ProviderConfigField {
	pt, ok := registry[typ]
	if !ok || pt.GroupConfig == nil {
		return nil
	}
	v := pt.GroupConfig
	required := map[string]bool{}
	p := &domain.Provider{Spec: domain.ProviderSpec{Type: typ}}
	for _, c := range ValidateGroupConfig(p, &domain.NodeGroupSpec{ProviderConfig: json.RawMessage(`{}`)}) {
		if c.Type == domain.CauseRequired {
			required[strings.TrimPrefix(c.Field, "spec.providerConfig.")] = true
		}
	}
	var own, shared []domain.ProviderConfigField
	t := reflect.TypeOf(v)
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			for j := range f.Type.NumField() {
				if fd, ok := configField(f.Type.Field(j), required); ok {
					shared = append(shared, fd)
				}
			}
			continue
		}
		if fd, ok := configField(f, required); ok {
			own = append(own, fd)
		}
	}
	return append(own, shared...)
}

func configField(f reflect.StructField, required map[string]bool) (domain.ProviderConfigField, bool) {
	key, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if key == "" || key == "-" {
		return domain.ProviderConfigField{}, false
	}
	var kind string
	switch f.Type.Kind() {
	case reflect.String:
		kind = domain.ConfigString
	case reflect.Bool:
		kind = domain.ConfigBool
	case reflect.Float32, reflect.Float64:
		kind = domain.ConfigNumber
	case reflect.Int, reflect.Int32, reflect.Int64:
		kind = domain.ConfigInteger
	case reflect.Slice:
		if f.Type.Elem().Kind() != reflect.String {
			return domain.ProviderConfigField{}, false
		}
		kind = domain.ConfigStrings
	default:
		return domain.ProviderConfigField{}, false
	}
	return domain.ProviderConfigField{Key: key, Kind: kind, Required: required[key]}, true
}
