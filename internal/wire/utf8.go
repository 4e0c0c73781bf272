package wire

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// badTextOffset returns the offset of the first text in a JSON document
// that is not valid Unicode: a byte that does not start a valid UTF-8
// sequence, or a \u escape of a UTF-16 surrogate that is not half of a
// pair (a high one followed by a \u escape of a low one). It returns -1
// when there is none. encoding/json would replace either with U+FFFD,
// silently turning two different strings into one.
func badTextOffset(b []byte) int {
	if utf8.Valid(b) && !mayHoldSurrogateEscape(b) {
		return -1 // the common case, in two fast passes
	}
	inString := false
	for i := 0; i < len(b); {
		c := b[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				return i
			}
			i += size
			continue
		}
		switch {
		case !inString:
			inString = c == '"'
			i++
		case c == '"':
			inString = false
			i++
		case c == '\\' && i+1 < len(b) && b[i+1] == 'u':
			r, ok := hex4(b, i+2)
			if !ok || !utf16.IsSurrogate(r) {
				i += 2 // malformed escapes are the JSON decoder's to report
				continue
			}
			if r >= 0xDC00 {
				return i // a low surrogate without a high one
			}
			if i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
				if r2, ok := hex4(b, i+8); ok && 0xDC00 <= r2 && r2 <= 0xDFFF {
					i += 12
					continue
				}
			}
			return i // a high surrogate without a low one
		case c == '\\':
			i += 2
		default:
			i++
		}
	}
	return -1
}

// mayHoldSurrogateEscape reports whether b holds the text \uD800 to
// \uDFFF (any case), escaped or not: a cheap filter before the exact scan.
func mayHoldSurrogateEscape(b []byte) bool {
	for {
		i := bytes.Index(b, []byte(`\u`))
		if i < 0 || i+4 > len(b) {
			return false
		}
		if d, h := b[i+2]|0x20, b[i+3]|0x20; d == 'd' && ('8' <= h && h <= '9' || 'a' <= h && h <= 'f') {
			return true
		}
		b = b[i+2:]
	}
}

// hex4 decodes the four hex digits at b[i:i+4].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// invalidTextError returns the 400 for a body whose text at offset is not
// valid Unicode, naming the field ("userProfile.displayName", "groups[2]")
// or the object whose key it is.
func invalidTextError(doc []byte, offset int) *Error {
	const why = "must be valid UTF-8 (no invalid bytes, no unpaired surrogate \\u escapes)"
	path, isKey, ok := pathAt(doc, offset)
	switch {
	case !ok:
		return BadRequest("request body %s", why)
	case isKey && path == "":
		return BadRequest("the keys of the request body %s", why)
	case isKey:
		return BadRequest("the keys of field %s %s", shortPath(path), why)
	case path == "":
		return BadRequest("request body %s", why)
	}
	return BadRequest("field %s %s", shortPath(path), why)
}

// shortPath bounds a field path quoted in a message.
func shortPath(p string) string {
	if len(p) > 255 {
		return strings.ToValidUTF8(p[:255], "") + "…"
	}
	return p
}

// pathSeg is one step of a field path: a key, or an array index.
type pathSeg struct {
	key   string
	index int
	isIdx bool
}

// joinPath writes segs as a field path ("userProfile.displayName",
// "groups[2]"), stopping once it is longer than shortPath keeps: a path's
// cost stays linear in the depth of the document.
func joinPath(segs []pathSeg) string {
	var b strings.Builder
	for _, s := range segs {
		if b.Len() > 255 {
			break
		}
		switch {
		case s.isIdx:
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(s.index))
			b.WriteByte(']')
		case b.Len() > 0:
			b.WriteByte('.')
			b.WriteString(s.key)
		default:
			b.WriteString(s.key)
		}
	}
	return b.String()
}

// pathFrame is one open object or array while walking a document.
type pathFrame struct {
	array   bool
	index   int  // next element's index (arrays)
	wantKey bool // the next token is a key (objects)
}

// pathAt walks doc's tokens and returns the path of the value (or, with
// isKey, of the object whose key) that spans offset. ok is false when the
// document ends or breaks before offset.
func pathAt(doc []byte, offset int) (path string, isKey, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var (
		stack []pathFrame
		segs  []pathSeg // segs[i] names stack[i+1] in stack[i]
	)
	key := "" // the key of the value that comes next, in the top object
	for {
		tok, err := dec.Token()
		if err == io.EOF || err != nil {
			return "", false, false
		}
		end := int(dec.InputOffset())
		var top *pathFrame
		if len(stack) > 0 {
			top = &stack[len(stack)-1]
		}
		if d, isDelim := tok.(json.Delim); isDelim && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
			if len(stack) > 0 && !stack[len(stack)-1].array {
				stack[len(stack)-1].wantKey = true
			}
			continue
		}
		if top != nil && !top.array && top.wantKey {
			if end > offset {
				return joinPath(segs), true, true
			}
			key = tok.(string)
			top.wantKey = false
			continue
		}
		// A value: name it.
		var seg pathSeg
		switch {
		case top == nil:
		case top.array:
			seg = pathSeg{index: top.index, isIdx: true}
			top.index++
		default:
			seg = pathSeg{key: key}
		}
		if end > offset && top != nil { // the value, an object or array too, begins at offset or spans it
			return joinPath(append(segs, seg)), false, true
		}
		if d, isDelim := tok.(json.Delim); isDelim {
			if top != nil {
				segs = append(segs, seg)
			}
			stack = append(stack, pathFrame{array: d == '[', wantKey: d == '{'})
			continue
		}
		if end > offset { // the document itself, a scalar
			return "", false, true
		}
		if top != nil && !top.array {
			top.wantKey = true
		}
	}
}
