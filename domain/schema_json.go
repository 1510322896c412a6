package domain

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// dropPath removes the field at path from the JSON document raw and keeps
// everything else as it was: the other members' bytes and their order. A
// decode into the kind's Go type and back would do it in fewer lines, but
// would also drop whatever that type does not know and could reorder, and
// stored canonical JSON is compared byte for byte (a status write that
// changes nothing appends nothing). changed is false, and raw is returned,
// when the field is not there.
func dropPath(raw json.RawMessage, path []string) (json.RawMessage, bool, error) {
	doc := bytes.TrimSpace(raw)
	if len(doc) == 0 || len(path) == 0 {
		return raw, false, nil
	}
	if path[0] == "[]" {
		if doc[0] != '[' {
			return raw, false, nil
		}
		var elems []json.RawMessage
		if err := json.Unmarshal(doc, &elems); err != nil {
			return nil, false, err
		}
		changed := false
		for i, e := range elems {
			next, c, err := dropPath(e, path[1:])
			if err != nil {
				return nil, false, fmt.Errorf("[%d]: %w", i, err)
			}
			if c {
				elems[i], changed = next, true
			}
		}
		if !changed {
			return raw, false, nil
		}
		return joinArray(elems), true, nil
	}
	if doc[0] != '{' {
		return raw, false, nil
	}
	members, err := objectMembers(doc)
	if err != nil {
		return nil, false, err
	}
	changed := false
	kept := members[:0]
	for _, m := range members {
		if m.key != path[0] {
			kept = append(kept, m)
			continue
		}
		if len(path) == 1 {
			changed = true
			continue
		}
		next, c, err := dropPath(m.value, path[1:])
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", m.key, err)
		}
		if c {
			m.value, changed = next, true
		}
		kept = append(kept, m)
	}
	if !changed {
		return raw, false, nil
	}
	return joinObject(kept), true, nil
}

type jsonMember struct {
	key   string
	value json.RawMessage
}

// objectMembers returns a JSON object's members in their order, each value
// as its bytes.
func objectMembers(doc []byte) ([]jsonMember, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	var out []jsonMember
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("object key %v is not a string", tok)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		out = append(out, jsonMember{key: key, value: v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	return out, nil
}

func joinObject(members []jsonMember) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			b.WriteByte(',')
		}
		key, _ := json.Marshal(m.key) // a string always encodes
		b.Write(key)
		b.WriteByte(':')
		b.Write(m.value)
	}
	b.WriteByte('}')
	return b.Bytes()
}

func joinArray(elems []json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, e := range elems {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(e)
	}
	b.WriteByte(']')
	return b.Bytes()
}
