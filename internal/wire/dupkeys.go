package wire

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
	"unsafe"
)

// keyReport is what scanKeys finds in a document's keys.
type keyReport struct {
	// dup is the path ("userProfile.displayName", "groups[2].name") of the
	// first key that its object holds twice; "" for none.
	dup string
	// miscased holds the offsets of the opening quotes of the keys that
	// name a struct field only in another letter case ("externalID" for
	// externalId), in document order; miscasedPath is the first one's path.
	miscased     []int
	miscasedPath string
}

// scanKeys walks the keys of doc, a valid JSON text decoded into a value
// of type t. Keys name fields exactly, as in JSON: a key that matches a
// struct field only in another letter case is an unknown field, which
// encoding/json would nevertheless read into that field; scanKeys reports
// it so that the caller can drop it. An object decoded into a struct that
// holds one of its fields twice, and an object kept as it is or decoded
// into a map (a securityContext) that holds a key twice, would say two
// things at once, the last word silently winning: the first such key is
// reported. Unknown fields, values included, are not looked at. The walk
// is one pass over the bytes; a key is unescaped only when it holds an
// escape.
func scanKeys(doc []byte, t reflect.Type) keyReport {
	type frame struct {
		typ     reflect.Type        // what the container decodes into; nil: kept as it is, or ignored
		ignored bool                // an unknown field's value, or inside one
		array   bool                //
		index   int                 // the current element (arrays)
		key     string              // the current key (objects)
		first   int                 // where the object's keys start in keys
		seen    map[string]struct{} // its keys, once there are many
	}
	var (
		rep   keyReport
		stack []frame
		// The checked keys of the open objects, each object's after its
		// parent's (an inner object ends before its parent's next key). An
		// unescaped key is a view of doc, which outlives the walk: no copy.
		keys []string
	)
	path := func() string {
		segs := make([]pathSeg, 0, len(stack))
		for _, f := range stack {
			if f.array {
				segs = append(segs, pathSeg{index: f.index, isIdx: true})
			} else {
				segs = append(segs, pathSeg{key: f.key})
			}
		}
		return joinPath(segs) // a copy: no view of doc
	}
	next, nextIgnored := t, false // the value that comes next
	wantKey := false
	for i := 0; i < len(doc); i++ {
		switch c := doc[i]; c {
		case '{':
			stack = append(stack, frame{typ: container(next, reflect.Struct, reflect.Map), ignored: nextIgnored, first: len(keys)})
			wantKey = true
		case '[':
			typ := container(next, reflect.Slice, reflect.Array)
			stack = append(stack, frame{typ: typ, ignored: nextIgnored, array: true})
			next = elem(typ)
			wantKey = false
		case '}', ']':
			if top := stack[len(stack)-1]; !top.array {
				keys = keys[:top.first]
			}
			stack = stack[:len(stack)-1]
			wantKey = false
		case ',':
			top := &stack[len(stack)-1]
			if top.array {
				top.index++
				next, nextIgnored = elem(top.typ), top.ignored
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
			top := &stack[len(stack)-1]
			if top.ignored {
				next, nextIgnored = nil, true
				continue
			}
			var key string
			if escaped {
				_ = json.Unmarshal(doc[start:i+1], &key)
			} else if i > start+1 {
				key = unsafe.String(&doc[start+1], i-start-1)
			}
			top.key = key
			switch {
			case top.typ == nil:
				next, nextIgnored = nil, false
			case top.typ.Kind() == reflect.Struct:
				fs := fieldsOf(top.typ)
				f, ok := fs.exact[key]
				if !ok {
					if _, folds := fs.folded[foldKey(key)]; folds {
						if rep.miscased == nil {
							rep.miscasedPath = path()
						}
						rep.miscased = append(rep.miscased, start)
					}
					next, nextIgnored = nil, true // unknown: ignored
					continue
				}
				next, nextIgnored = f, false
			default: // a map
				next, nextIgnored = top.typ.Elem(), false
			}
			if rep.dup != "" {
				continue
			}
			dup := false
			if top.seen != nil {
				_, dup = top.seen[key]
				top.seen[key] = struct{}{}
			} else {
				dup = slices.Contains(keys[top.first:], key)
				if keys = append(keys, key); len(keys)-top.first > 32 {
					// Many keys: a set keeps the walk linear.
					top.seen = make(map[string]struct{}, 2*(len(keys)-top.first))
					for _, k := range keys[top.first:] {
						top.seen[k] = struct{}{}
					}
				}
			}
			if dup {
				rep.dup = path()
			}
		}
	}
	return rep
}

// dropMembers returns a copy of doc, a valid JSON text, without the
// object members whose keys' opening quotes are at starts (in document
// order, none inside another's value), each with the comma that
// separated it from a neighbour.
func dropMembers(doc []byte, starts []int) []byte {
	doc = slices.Clone(doc)
	for i := len(starts) - 1; i >= 0; i-- {
		s := starts[i]
		e := skipSpace(doc, skipValue(doc, s)) // past the key, at the colon
		e = skipValue(doc, skipSpace(doc, e+1))
		if j := skipSpace(doc, e); doc[j] == ',' {
			e = j + 1
		} else { // the object's last member: the comma before it goes
			k := s - 1
			for isSpace(doc[k]) {
				k--
			}
			if doc[k] == ',' {
				s = k
			}
		}
		doc = append(doc[:s], doc[e:]...)
	}
	return doc
}

// skipValue returns the offset just past the JSON value of doc that
// starts at i.
func skipValue(doc []byte, i int) int {
	depth := 0
	for ; i < len(doc); i++ {
		switch doc[i] {
		case '"':
			for i++; doc[i] != '"'; i++ {
				if doc[i] == '\\' {
					i++
				}
			}
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				return i + 1
			}
			if depth < 0 {
				return i
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i
			}
		}
	}
	return i
}

func skipSpace(doc []byte, i int) int {
	for i < len(doc) && isSpace(doc[i]) {
		i++
	}
	return i
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

// container returns t without its pointers when it is of one of kinds;
// nil otherwise, and for a json.Unmarshaler that is not a struct (such as
// json.RawMessage, passed on as it is). A struct that decodes itself is
// taken to read its fields as encoding/json would (UserAttribute does).
func container(t reflect.Type, kinds ...reflect.Kind) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || !slices.Contains(kinds, t.Kind()) || t.Kind() != reflect.Struct && decodesItself(t) {
		return nil
	}
	return t
}

// selfDecoding caches decodesItself.
var selfDecoding sync.Map // reflect.Type → bool

// decodesItself reports whether *t is a json.Unmarshaler.
func decodesItself(t reflect.Type) bool {
	if v, ok := selfDecoding.Load(t); ok {
		return v.(bool)
	}
	is := reflect.PointerTo(t).Implements(unmarshaler)
	selfDecoding.Store(t, is)
	return is
}

// elem is the element type of a slice or array type; nil for nil.
func elem(t reflect.Type) reflect.Type {
	if t == nil {
		return nil
	}
	return t.Elem()
}

// fields are a struct type's fields by JSON name: as named, and folded.
type fields struct{ exact, folded map[string]reflect.Type }

// fieldTypes caches fieldsOf.
var fieldTypes sync.Map // reflect.Type → *fields

// fieldsOf maps the JSON names of struct type t's fields (as encoding/json
// names them: the tag's name, else the field's; embedded structs' fields
// promoted) to their types.
func fieldsOf(t reflect.Type) *fields {
	if m, ok := fieldTypes.Load(t); ok {
		return m.(*fields)
	}
	fs := &fields{exact: map[string]reflect.Type{}, folded: map[string]reflect.Type{}}
	var add func(t reflect.Type)
	add = func(t reflect.Type) {
		for f := range t.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" && !strings.Contains(f.Tag.Get("json"), ",") {
				continue
			}
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
				add(ft)
				continue
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if _, ok := fs.exact[name]; !ok {
				fs.exact[name] = f.Type
			}
			if _, ok := fs.folded[foldKey(name)]; !ok {
				fs.folded[foldKey(name)] = f.Type
			}
		}
	}
	add(t)
	fieldTypes.Store(t, fs)
	return fs
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
