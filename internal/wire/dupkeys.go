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

// duplicateKey returns the path ("userProfile.displayName", "groups[2].name")
// of the first key of doc, a valid JSON text decoded into a value of type
// t, that its object holds already. In an object decoded into a struct,
// keys that differ only in letter case count as one: encoding/json reads
// them into one field, the last one winning, so a body that says two
// things at once would mean whatever its last word is. Elsewhere (a map,
// a json.RawMessage passed on as it is, a field the type does not have)
// only equal keys are one: "Region" and "region" are two keys of a
// security context. Such a body is refused. The walk is one pass over the
// bytes; a key is unescaped only when it holds an escape.
func duplicateKey(doc []byte, t reflect.Type) (string, bool) {
	type frame struct {
		typ   reflect.Type        // what the container decodes into; nil: kept as it is, or ignored
		array bool                //
		index int                 // the current element (arrays)
		key   string              // the current key (objects)
		first int                 // where the object's keys start in keys
		seen  map[string]struct{} // its keys, once there are many
	}
	var (
		stack []frame
		// The keys of the open objects, folded where a struct's, each
		// object's after its parent's (an inner object ends before its
		// parent's next key). An unescaped key is a view of doc, which
		// outlives the walk: no copy.
		keys []string // as written: a struct's compare with strings.EqualFold, encoding/json's folding
	)
	next := t // the type of the value that comes next
	wantKey := false
	for i := 0; i < len(doc); i++ {
		switch c := doc[i]; c {
		case '{':
			stack = append(stack, frame{typ: container(next, reflect.Struct, reflect.Map), first: len(keys)})
			wantKey = true
		case '[':
			typ := container(next, reflect.Slice, reflect.Array)
			stack = append(stack, frame{typ: typ, array: true})
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
				next = elem(top.typ)
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
			var key string
			if escaped {
				_ = json.Unmarshal(doc[start:i+1], &key)
			} else if i > start+1 {
				key = unsafe.String(&doc[start+1], i-start-1)
			}
			top := &stack[len(stack)-1]
			top.key = key
			fold := false
			switch {
			case top.typ == nil:
				next = nil
			case top.typ.Kind() == reflect.Struct:
				fold = true
				next = fieldOf(top.typ, key)
			default: // a map
				next = top.typ.Elem()
			}
			dup := false
			if top.seen != nil {
				k := key
				if fold {
					k = foldKey(key)
				}
				_, dup = top.seen[k]
				top.seen[k] = struct{}{}
			} else {
				if fold {
					dup = slices.ContainsFunc(keys[top.first:], func(k string) bool { return strings.EqualFold(k, key) })
				} else {
					dup = slices.Contains(keys[top.first:], key)
				}
				if keys = append(keys, key); len(keys)-top.first > 32 {
					// Many keys: a set keeps the walk linear.
					top.seen = make(map[string]struct{}, 2*(len(keys)-top.first))
					for _, k := range keys[top.first:] {
						if fold {
							k = foldKey(k)
						}
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
				return joinPath(segs), true // a copy: no view of doc
			}
		}
	}
	return "", false
}

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

// fieldOf returns the type of struct type t's field that encoding/json
// decodes key into (nil for none): its exact name first, as most keys
// are written, then its folded name.
func fieldOf(t reflect.Type, key string) reflect.Type {
	fs := fieldsOf(t)
	if f, ok := fs.exact[key]; ok {
		return f
	}
	return fs.folded[foldKey(key)]
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
