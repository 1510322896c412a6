package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// document is one object read from a manifest: its JSON, the fields that
// route it to an endpoint, and where it came from for messages.
type document struct {
	// Source names the document in messages: "file.yaml (document 2, line 14)".
	Source string
	// Raw is the object as JSON.
	Raw        json.RawMessage
	APIVersion string
	Kind       string
	Name       string
	Tenant     string
}

// manifestExts are the files apply and create read from a directory.
var manifestExts = map[string]bool{".yaml": true, ".yml": true, ".json": true}

// readManifests reads every document from the paths given with -f: files,
// directories (their .yaml, .yml and .json files, sorted, not recursive) and
// "-" for stdin.
func readManifests(paths []string, stdin io.Reader) ([]document, error) {
	if len(paths) == 0 {
		return nil, errors.New("give the objects with -f FILE, -f DIR or -f - (stdin)")
	}
	var docs []document
	for _, p := range paths {
		if p == "-" {
			d, err := parseDocuments(stdin, "stdin")
			if err != nil {
				return nil, err
			}
			docs = append(docs, d...)
			continue
		}
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		files := []string{p}
		if st.IsDir() {
			entries, err := os.ReadDir(p)
			if err != nil {
				return nil, err
			}
			files = files[:0]
			for _, e := range entries {
				if !e.IsDir() && manifestExts[strings.ToLower(filepath.Ext(e.Name()))] {
					files = append(files, filepath.Join(p, e.Name()))
				}
			}
			sort.Strings(files)
			if len(files) == 0 {
				return nil, fmt.Errorf("%s holds no .yaml, .yml or .json files", p)
			}
		}
		for _, f := range files {
			fh, err := os.Open(f)
			if err != nil {
				return nil, err
			}
			d, err := parseDocuments(fh, f)
			fh.Close()
			if err != nil {
				return nil, err
			}
			docs = append(docs, d...)
		}
	}
	if len(docs) == 0 {
		return nil, errors.New("no objects given")
	}
	return docs, nil
}

// parseDocuments reads a stream of YAML documents (JSON is YAML too). Empty
// documents are skipped and a List's items become documents of their own.
// Every document must be an object with a kind and metadata.name.
func parseDocuments(r io.Reader, source string) ([]document, error) {
	dec := yaml.NewDecoder(r)
	var docs []document
	for i := 1; ; i++ {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", source, i, err)
		}
		line := n.Line
		if len(n.Content) > 0 {
			line = n.Content[0].Line // past a leading ---
		}
		where := fmt.Sprintf("%s (document %d, line %d)", source, i, line)
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if v == nil {
			continue // an empty document, e.g. a trailing ---
		}
		v, err = jsonCompatible(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: not an object", where)
		}
		if items, ok := obj["items"].([]any); ok && strings.HasSuffix(str(obj["kind"]), "List") {
			for j, it := range items {
				d, err := newDocument(it, fmt.Sprintf("%s item %d", where, j))
				if err != nil {
					return nil, err
				}
				docs = append(docs, d)
			}
			continue
		}
		d, err := newDocument(obj, where)
		if err != nil {
			return nil, err
		}
		docs = append(docs, d)
	}
}

func newDocument(v any, where string) (document, error) {
	obj, ok := v.(map[string]any)
	if !ok {
		return document{}, fmt.Errorf("%s: not an object", where)
	}
	meta, _ := obj["metadata"].(map[string]any)
	d := document{Source: where, APIVersion: str(obj["apiVersion"]), Kind: str(obj["kind"]),
		Name: str(meta["name"]), Tenant: str(meta["tenant"])}
	if d.Kind == "" {
		return document{}, fmt.Errorf("%s: kind is missing", where)
	}
	if d.Name == "" {
		return document{}, fmt.Errorf("%s: metadata.name is missing", where)
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return document{}, fmt.Errorf("%s: %w", where, err)
	}
	d.Raw = raw
	return d, nil
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// jsonCompatible turns what the YAML decoder produced into values
// encoding/json can write: maps with non-string keys are refused rather than
// guessed at, and non-finite floats too.
func jsonCompatible(v any) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			c, err := jsonCompatible(e)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			t[k] = c
		}
		return t, nil
	case map[any]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			ks, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("key %v is not a string", k)
			}
			c, err := jsonCompatible(e)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", ks, err)
			}
			m[ks] = c
		}
		return m, nil
	case []any:
		for i, e := range t {
			c, err := jsonCompatible(e)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			t[i] = c
		}
		return t, nil
	case float64:
		if t != t || t > 1.7976931348623157e308 || t < -1.7976931348623157e308 {
			return nil, fmt.Errorf("%v is not a JSON number", t)
		}
		return t, nil
	}
	return v, nil
}

// setMeta returns the document's JSON with metadata fields set (a nil value
// removes the field) and kind and apiVersion filled in. Everything else is
// passed on untouched so that the server, which decodes strictly, reports
// unknown fields by name.
func (d document) setMeta(kindName, apiVersion string, meta map[string]any) (json.RawMessage, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(d.Raw, &top); err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if raw, ok := top["metadata"]; ok {
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("%s: metadata is not an object", d.Source)
		}
	}
	if m == nil {
		m = map[string]json.RawMessage{}
	}
	for k, v := range meta {
		if v == nil {
			delete(m, k)
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		m[k] = b
	}
	mb, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	top["metadata"] = mb
	top["kind"], _ = json.Marshal(kindName)
	top["apiVersion"], _ = json.Marshal(apiVersion)
	return json.Marshal(top)
}

// hasMeta reports whether the document's metadata sets a field at all.
func (d document) hasMeta(field string) bool {
	var top struct {
		Metadata map[string]json.RawMessage `json:"metadata"`
	}
	if json.Unmarshal(d.Raw, &top) != nil {
		return false
	}
	_, ok := top.Metadata[field]
	return ok
}

// toYAML renders JSON as block YAML, keeping the order of object keys (the
// server's order, so output reads like the API documentation) and writing
// multi-line strings such as config patches as literal blocks.
func toYAML(b []byte) ([]byte, error) {
	n, err := yamlNode(b)
	if err != nil {
		return nil, err
	}
	return encodeYAML(n)
}

// yamlNode turns JSON into a YAML node tree, keeping key order.
func yamlNode(b []byte) (*yaml.Node, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return jsonToNode(dec)
}

// encodeYAML writes a node (or any value) as YAML indented by two spaces.
func encodeYAML(n any) ([]byte, error) {
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func jsonToNode(dec *json.Decoder) (*yaml.Node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, _ := kt.(string)
				v, err := jsonToNode(dec)
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
			}
			_, err := dec.Token() // }
			return n, err
		case '[':
			n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
			for dec.More() {
				v, err := jsonToNode(dec)
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, v)
			}
			_, err := dec.Token() // ]
			return n, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	case string:
		n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: t}
		if strings.Contains(t, "\n") {
			n.Style = yaml.LiteralStyle
		}
		return n, nil
	case json.Number:
		tag := "!!int"
		if strings.ContainsAny(t.String(), ".eE") {
			tag = "!!float"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: t.String()}, nil
	case bool:
		v := "false"
		if t {
			v = "true"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: v}, nil
	case nil:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}, nil
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}
