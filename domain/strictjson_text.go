package domain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// CheckJSONText reports what is wrong with the text of the JSON document data
// whatever it is decoded into, which encoding/json lets pass silently: bytes
// that are not UTF-8 (it would store U+FFFD in their place), as one
// CauseInvalid on root giving the byte offset, and keys given twice in one
// object (it would keep the last), as CauseDuplicate. like, a pointer or nil,
// names the paths of duplicates the way DecodeStrict does for a value of its
// type ("metadata.labels[a]"); with nil they are dotted. Malformed JSON is not
// reported here: DecodeStrict or the decoder says what is wrong with it.
func CheckJSONText(data []byte, root string, like any) []Cause {
	if c := checkUTF8(data, root); c != nil {
		return []Cause{*c}
	}
	var t reflect.Type
	if like != nil {
		t = reflect.TypeOf(like)
	}
	var causes []Cause
	for _, segs := range duplicateKeys(data) {
		field := joinPath(root, strings.Join(segs, "."))
		if t != nil {
			field = strictErrorPath(root, t, strings.Join(segs, "."))
		}
		causes = append(causes, Cause{Field: field, Type: CauseDuplicate, Message: msgDuplicateField})
	}
	return causes
}

// checkUTF8 reports the first byte of data that does not begin valid UTF-8.
func checkUTF8(data []byte, root string) *Cause {
	if utf8.Valid(data) {
		return nil
	}
	off := 0
	for off < len(data) {
		r, n := utf8.DecodeRune(data[off:])
		if r == utf8.RuneError && n <= 1 {
			break
		}
		off += n
	}
	return &Cause{Field: root, Type: CauseInvalid, Message: fmt.Sprintf("invalid UTF-8 at byte offset %d", off)}
}

// jsonFrame is one open object or array while scanning tokens.
type jsonFrame struct {
	object  bool
	keys    map[string]bool
	key     string // the key whose value comes next (objects)
	index   int    // the index of the next element (arrays)
	wantKey bool
}

// duplicateKeys scans data for keys given twice in one object and returns the
// path of each, as segments (keys and array indexes), in document order. It
// stops quietly at malformed JSON.
func duplicateKeys(data []byte) [][]string {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var stack []*jsonFrame
	var dups [][]string
	path := func() []string {
		segs := make([]string, 0, len(stack))
		for _, f := range stack {
			if f.object {
				segs = append(segs, f.key)
			} else {
				segs = append(segs, strconv.Itoa(f.index))
			}
		}
		return segs
	}
	// valueDone moves the enclosing frame on once one of its values is read.
	valueDone := func() {
		if len(stack) == 0 {
			return
		}
		top := stack[len(stack)-1]
		if top.object {
			top.wantKey = true
		} else {
			top.index++
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return dups
		}
		if len(stack) > 0 {
			if top := stack[len(stack)-1]; top.object && top.wantKey {
				if k, ok := tok.(string); ok {
					top.key, top.wantKey = k, false
					if top.keys[k] {
						dups = append(dups, path())
					}
					top.keys[k] = true
					continue
				}
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &jsonFrame{object: true, keys: map[string]bool{}, wantKey: true})
		case json.Delim('['):
			stack = append(stack, &jsonFrame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			valueDone()
		default:
			valueDone()
		}
	}
}
