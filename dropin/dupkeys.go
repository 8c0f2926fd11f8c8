package dropin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// DuplicateKeyError is a JSON body with a key twice in one object. Elasticsearch refuses such a body (400,
// x_content_parse_exception "[line:column] Duplicate field 'size'"); encoding/json would keep the last value,
// so the sidecar refuses it the same way, pointing into the caller's own body.
type DuplicateKeyError struct {
	// Key is the repeated key; Path the JSON path of the object holding it ("" for the top level).
	Key, Path string
	// Line and Column (both from 1) are where Elasticsearch puts them: just after the second key's name.
	Line, Column int
}

func (e *DuplicateKeyError) Error() string {
	return fmt.Sprintf("[%d:%d] Duplicate field '%s'", e.Line, e.Column, e.Key)
}

// Field is the JSON path of the repeated key, as an InputError names a field.
func (e *DuplicateKeyError) Field() string {
	if e.Path == "" {
		return e.Key
	}
	return e.Path + "." + e.Key
}

// CheckDuplicateKeys returns a *DuplicateKeyError for the first key repeated within one object of body, nil
// when there is none or body is not JSON (the decoder that reads it next says what is wrong).
func CheckDuplicateKeys(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	type frame struct {
		object bool
		keys   map[string]bool
		path   string
		key    bool // an object's next token is a key
		index  int  // an array's next element
	}
	var stack []*frame
	// elem is the path of the value the top frame's next token starts.
	var pendingKey string
	elem := func() string {
		if len(stack) == 0 {
			return ""
		}
		top := stack[len(stack)-1]
		if top.object {
			if top.path == "" {
				return pendingKey
			}
			return top.path + "." + pendingKey
		}
		return fmt.Sprintf("%s[%d]", top.path, top.index)
	}
	valueDone := func() {
		if len(stack) == 0 {
			return
		}
		top := stack[len(stack)-1]
		if top.object {
			top.key = true
		} else {
			top.index++
		}
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return nil
		}
		if len(stack) > 0 && stack[len(stack)-1].object && stack[len(stack)-1].key {
			top := stack[len(stack)-1]
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				valueDone()
				continue
			}
			key, _ := tok.(string)
			if top.keys[key] {
				line, col := position(body, int(dec.InputOffset()))
				return &DuplicateKeyError{Key: key, Path: top.path, Line: line, Column: col}
			}
			top.keys[key], top.key, pendingKey = true, false, key
			continue
		}
		switch d, _ := tok.(json.Delim); d {
		case '{':
			stack = append(stack, &frame{object: true, keys: map[string]bool{}, path: elem(), key: true})
		case '[':
			stack = append(stack, &frame{path: elem()})
		case ']', '}':
			stack = stack[:len(stack)-1]
			valueDone()
		default:
			valueDone()
		}
	}
}

// position is the 1-based line and column of byte offset off in body.
func position(body []byte, off int) (line, col int) {
	off = min(off, len(body))
	line = 1 + bytes.Count(body[:off], []byte("\n"))
	start := strings.LastIndexByte(string(body[:off]), '\n') + 1
	return line, off - start + 1
}
