package wire

import (
	"encoding/json"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// duplicateKey returns the path ("userProfile.displayName", "groups[2].name")
// of the first key of doc, a valid JSON text, that its object holds
// already, where keys that differ only in letter case count as one:
// encoding/json reads such keys into one field, the last one winning, so
// a body that says two things at once would mean whatever its last word
// is. Such a body is refused instead. The walk is one pass over the bytes;
// a key is unescaped only when it holds an escape.
func duplicateKey(doc []byte) (string, bool) {
	type frame struct {
		array bool
		index int                 // the current element (arrays)
		key   string              // the current key (objects)
		keys  []string            // the keys so far, folded (objects)
		seen  map[string]struct{} // the same, once there are many
	}
	var stack []frame
	wantKey := false
	for i := 0; i < len(doc); i++ {
		switch c := doc[i]; c {
		case '{':
			stack = append(stack, frame{})
			wantKey = true
		case '[':
			stack = append(stack, frame{array: true})
			wantKey = false
		case '}', ']':
			stack = stack[:len(stack)-1]
			wantKey = false
		case ',':
			top := &stack[len(stack)-1]
			if top.array {
				top.index++
			} else {
				wantKey = true
			}
		case '"':
			start := i
			escaped := false
			for i++; doc[i] != '"'; i++ {
				if doc[i] == '\\' {
					escaped = true
					i++
				}
			}
			if !wantKey {
				continue
			}
			wantKey = false
			key := string(doc[start+1 : i])
			if escaped {
				_ = json.Unmarshal(doc[start:i+1], &key)
			}
			top := &stack[len(stack)-1]
			top.key = key
			folded := foldKey(key)
			dup := false
			if top.seen != nil {
				_, dup = top.seen[folded]
				top.seen[folded] = struct{}{}
			} else {
				dup = slices.Contains(top.keys, folded)
				if top.keys = append(top.keys, folded); len(top.keys) > 32 {
					// Many keys: a set keeps the walk linear.
					top.seen = make(map[string]struct{}, 2*len(top.keys))
					for _, k := range top.keys {
						top.seen[k] = struct{}{}
					}
				}
			}
			if dup {
				segs := make([]pathSeg, 0, len(stack))
				for _, f := range stack {
					if f.array {
						segs = append(segs, pathSeg{index: f.index, isIdx: true})
					} else {
						segs = append(segs, pathSeg{key: f.key})
					}
				}
				return joinPath(segs), true
			}
		}
	}
	return "", false
}

// foldKey maps s to one representative of the keys encoding/json takes
// for it: each rune by the smallest rune of its simple case folding
// orbit, in lower case when that is ASCII (so "K", "k" and the Kelvin
// sign are all "k").
func foldKey(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= utf8.RuneSelf || 'A' <= c && c <= 'Z' {
			ascii = false
			break
		}
	}
	if ascii {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			m = min(m, f)
		}
		if 'A' <= m && m <= 'Z' {
			m += 'a' - 'A'
		}
		b.WriteRune(m)
	}
	return b.String()
}
