package handlers

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// mergePatch applies an RFC 7386 JSON merge patch to doc. It is a few lines, so
// it is written here rather than pulling in a JSON-patch library for it.
func mergePatch(doc, patch []byte) ([]byte, error) {
	var d, p any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("decoding the object: %w", err)
	}
	dec = json.NewDecoder(bytes.NewReader(patch))
	dec.UseNumber()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("decoding the patch: %w", err)
	}
	return json.Marshal(mergeValue(d, p))
}

func mergeValue(target, patch any) any {
	pm, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	tm, ok := target.(map[string]any)
	if !ok {
		tm = map[string]any{}
	}
	for k, v := range pm {
		if v == nil {
			delete(tm, k)
			continue
		}
		tm[k] = mergeValue(tm[k], v)
	}
	return tm
}
