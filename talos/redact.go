package talos

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	yaml "go.yaml.in/yaml/v4"
)

// secretFields are the keys of a Talos machine config whose values are
// secrets wherever they appear: the trustd and bootstrap tokens, the
// discovery and encryption secrets, and private keys (key: under every CA and
// certificate pair). A value under another key is a secret too when it is,
// or base64-decodes to, a PEM private key (a patch may put one anywhere).
var secretFields = map[string]bool{
	"key":                       true,
	"token":                     true,
	"secret":                    true,
	"secretboxEncryptionSecret": true,
	"aescbcEncryptionSecret":    true,
	"bootstrapToken":            true,
	"privateKey":                true,
}

// RedactSecrets returns cfg (a machine config: YAML documents) with every
// secret value emptied, and the paths of what it left out
// (machine.ca.key, cluster.token, …; a document after the first is named by
// its kind). Empty values are not secrets and stay as they are, so a worker's
// empty CA keys are not listed. The documents are otherwise encoded as
// machinery encodes them, so a redacted config differs from the full one only
// in the values left out, and still loads (an empty key is what a worker's
// config holds anyway): the header RedactionHeader makes says what is gone.
func RedactSecrets(cfg []byte) ([]byte, []string, error) {
	dec := yaml.NewDecoder(bytes.NewReader(cfg))
	var (
		docs    [][]byte
		leftOut []string
	)
	for i := 0; ; i++ {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("reading document %d of the config: %w", i+1, err)
		}
		prefix := ""
		if i > 0 {
			prefix = documentName(&doc) + "."
		}
		leftOut = redactNode(&doc, prefix, "", leftOut)
		out, err := yaml.Marshal(&doc)
		if err != nil {
			return nil, nil, fmt.Errorf("encoding document %d of the config: %w", i+1, err)
		}
		docs = append(docs, out)
	}
	return bytes.Join(docs, []byte("---\n")), leftOut, nil
}

// documentName names a document after the first by its kind (and name).
func documentName(doc *yaml.Node) string {
	kind, name := "document", ""
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode {
		m := doc.Content[0]
		for i := 0; i+1 < len(m.Content); i += 2 {
			switch m.Content[i].Value {
			case "kind":
				kind = m.Content[i+1].Value
			case "name":
				name = m.Content[i+1].Value
			}
		}
	}
	if name != "" {
		return kind + "(" + name + ")"
	}
	return kind
}

// redactNode replaces the secret scalars under n; path is n's dotted path.
func redactNode(n *yaml.Node, prefix, path string, leftOut []string) []string {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			leftOut = redactNode(c, prefix, path, leftOut)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := joinPath(path, k.Value)
			if v.Kind == yaml.ScalarNode && v.Value != "" && (secretFields[k.Value] || isPrivateKey(v.Value)) {
				leftOut = append(leftOut, prefix+p)
				redactScalar(v)
				continue
			}
			leftOut = redactNode(v, prefix, p, leftOut)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			if c.Kind == yaml.ScalarNode && isPrivateKey(c.Value) {
				leftOut = append(leftOut, prefix+p)
				redactScalar(c)
				continue
			}
			leftOut = redactNode(c, prefix, p, leftOut)
		}
	}
	return leftOut
}

func redactScalar(v *yaml.Node) {
	v.Value, v.Tag, v.Style = "", "!!str", yaml.DoubleQuotedStyle
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// isPrivateKey reports whether s is a PEM private key, plain or base64 (as
// machinery encodes every key); file contents holding one anywhere count.
func isPrivateKey(s string) bool {
	if strings.Contains(s, "PRIVATE KEY-----") {
		return true
	}
	if len(s) < 40 {
		return false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	return err == nil && bytes.Contains(raw, []byte("PRIVATE KEY-----"))
}

// RedactionHeader is the comment a redacted config starts with: what was
// left out and who reads it.
func RedactionHeader(leftOut []string) []byte {
	if len(leftOut) == 0 {
		return nil
	}
	var b bytes.Buffer
	b.WriteString("# RezusCloud left out the secrets of this config (only global admins read them, with\n")
	b.WriteString("# includeSecrets=true, audited); these are empty here:\n")
	for _, p := range slices.Compact(slices.Clone(leftOut)) {
		b.WriteString("#   " + p + "\n")
	}
	return b.Bytes()
}
