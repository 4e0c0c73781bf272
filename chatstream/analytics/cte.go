package analytics

import "strings"

// cteNamedLike returns the first name in q that is defined like a common
// table expression ("name AS (", "name(a, b) AS NOT MATERIALIZED (") and
// is one of views, or "". SQLite names the authorizer's context after a
// common table expression as it does after a view, so a query must not
// define one that the authorizer would take for a filtered view. The scan
// is conservative: anything shaped like such a definition counts (a window
// named like a view, for one), which only ever refuses a query.
func cteNamedLike(q string, views map[string]bool) string {
	toks := sqlTokens(q)
	for i, t := range toks {
		if !t.ident || !views[t.text] {
			continue
		}
		j := i + 1
		if j < len(toks) && toks[j].text == "(" { // column list
			depth := 0
			for ; j < len(toks); j++ {
				switch toks[j].text {
				case "(":
					depth++
				case ")":
					depth--
				}
				if depth == 0 {
					break
				}
			}
			j++
		}
		if j >= len(toks) || toks[j].text != "as" {
			continue
		}
		j++
		if j < len(toks) && toks[j].text == "not" {
			j++
		}
		if j < len(toks) && toks[j].text == "materialized" {
			j++
		}
		if j < len(toks) && toks[j].text == "(" {
			return t.text
		}
	}
	return ""
}

// sqlToken is a token of SQL text: an identifier or keyword (lower-cased,
// quotes removed), or a single punctuation character. String literals,
// numbers, blobs and comments are dropped.
type sqlToken struct {
	text  string
	ident bool
}

// sqlTokens splits SQLite SQL text into tokens, following SQLite's lexical
// rules for comments, string literals and the four ways of quoting an
// identifier.
func sqlTokens(q string) []sqlToken {
	var out []sqlToken
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == '-' && i+1 < len(q) && q[i+1] == '-':
			for i < len(q) && q[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			end := strings.Index(q[i+2:], "*/")
			if end < 0 {
				i = len(q)
			} else {
				i += end + 4
			}
		case c == '\'':
			i = skipQuoted(q, i, '\'')
		case c == '"' || c == '`':
			end := skipQuoted(q, i, c)
			inner := q[i+1 : max(i+1, end-1)]
			inner = strings.ReplaceAll(inner, string([]byte{c, c}), string(c))
			out = append(out, sqlToken{text: strings.ToLower(inner), ident: true})
			i = end
		case c == '[':
			end := strings.IndexByte(q[i:], ']')
			if end < 0 {
				end = len(q) - i
			}
			out = append(out, sqlToken{text: strings.ToLower(q[i+1 : i+end]), ident: true})
			i += end + 1
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80:
			j := i
			for j < len(q) && (q[j] == '_' || q[j] == '$' || q[j] >= 'a' && q[j] <= 'z' || q[j] >= 'A' && q[j] <= 'Z' || q[j] >= '0' && q[j] <= '9' || q[j] >= 0x80) {
				j++
			}
			out = append(out, sqlToken{text: strings.ToLower(q[i:j]), ident: true})
			i = j
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(q) && q[i+1] >= '0' && q[i+1] <= '9':
			j := i
			for j < len(q) && (q[j] == '.' || q[j] == '_' || q[j] >= '0' && q[j] <= '9' || q[j] >= 'a' && q[j] <= 'z' || q[j] >= 'A' && q[j] <= 'Z') {
				j++
			}
			i = j
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		default:
			out = append(out, sqlToken{text: string(c)})
			i++
		}
	}
	return out
}

// skipQuoted returns the index just past the quoted text starting at q[i],
// where a doubled quote character stands for itself.
func skipQuoted(q string, i int, quote byte) int {
	for j := i + 1; j < len(q); j++ {
		if q[j] == quote {
			if j+1 < len(q) && q[j+1] == quote {
				j++
				continue
			}
			return j + 1
		}
	}
	return len(q)
}
