package analytics

import "strings"

// maxCTECopies and maxViewCopies bound how many copies of common table
// expressions, and of the model's views, a query may make SQLite compile.
// SQLite copies a common table expression's SELECT into every place that
// reads it, and a view's into every place that names it, before anything
// the authorizer or an interrupt can stop: a chain of common table
// expressions, each read twice by the next, is compiled in time and memory
// exponential in the chain's length (19 links, about 600 bytes: 30 s and
// 1.6 GB), and each copy of a view costs a little more.
const (
	maxCTECopies  = 256
	maxViewCopies = 1024
)

// compileCopies returns upper bounds of the copies of common table
// expressions and of views (named in views, lower case) that compiling q
// makes. The first is the product, over every definition in q of the form
// "name [(columns)] AS [[NOT] MATERIALIZED] (", of the number of other
// places its name appears (a name defined again, in a nested WITH,
// multiplies again: each definition is copied into its own readers); the
// second is that product times the number
// of places a view's name appears. It reads q as SQLite's tokenizer does
// (strings, quoted names, comments), in one pass, and never
// underestimates: a name counted where it is not a reference only makes
// the bounds larger.
func compileCopies(q string, views map[string]bool) (ctes, viewCopies float64) {
	toks := sqlTokens(q)
	count := map[string]int{}
	defined := map[string]int{} // definitions per name
	refs := 0
	// Parentheses are punctuation, never a quoted name that reads the
	// same (")" or [)] as a column's name): taking one for the other would
	// skip a definition and underestimate. A keyword quoted is matched
	// too, which only adds definitions.
	punct := func(j int, s string) bool { return j < len(toks) && !toks[j].name && toks[j].text == s }
	for i, t := range toks {
		if !t.name {
			continue
		}
		count[t.text]++
		if views[t.text] {
			refs++
		}
		j := i + 1
		if punct(j, "(") {
			for j < len(toks) && !punct(j, ")") {
				j++
			}
			j++
		}
		if j < len(toks) && toks[j].text == "as" {
			j++
			if j < len(toks) && toks[j].text == "not" {
				j++
			}
			if j < len(toks) && toks[j].text == "materialized" {
				j++
			}
			if punct(j, "(") {
				defined[t.text]++
			}
		}
	}
	ctes = 1.0
	for n, defs := range defined {
		for range defs {
			ctes *= float64(max(1, count[n]-1))
		}
	}
	return ctes, ctes * float64(refs)
}

type sqlToken struct {
	text string // lower case; a quoted name without its quotes
	name bool   // an identifier, quoted or not, or a keyword
}

// sqlTokens splits q into SQLite's tokens, leaving out white space,
// comments, strings and numbers.
func sqlTokens(q string) []sqlToken {
	var out []sqlToken
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		case c == '-' && i+1 < len(q) && q[i+1] == '-':
			for i < len(q) && q[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			end := strings.Index(q[i+2:], "*/")
			if end < 0 {
				return out
			}
			i += end + 4
		case c == '\'' || c == '"' || c == '`' || c == '[':
			closer := c
			if c == '[' {
				closer = ']'
			}
			var b strings.Builder
			j := i + 1
			for j < len(q) {
				if q[j] == closer {
					if closer != ']' && j+1 < len(q) && q[j+1] == closer {
						b.WriteByte(closer)
						j += 2
						continue
					}
					break
				}
				b.WriteByte(q[j])
				j++
			}
			// A string literal can name a common table expression too.
			out = append(out, sqlToken{text: strings.ToLower(b.String()), name: true})
			i = j + 1
		case c == '_' || c >= 0x80 || c == '$' || (c|0x20 >= 'a' && c|0x20 <= 'z'):
			j := i
			for j < len(q) && (q[j] == '_' || q[j] == '$' || q[j] >= 0x80 || (q[j]|0x20 >= 'a' && q[j]|0x20 <= 'z') || (q[j] >= '0' && q[j] <= '9')) {
				j++
			}
			out = append(out, sqlToken{text: strings.ToLower(q[i:j]), name: true})
			i = j
		default:
			out = append(out, sqlToken{text: q[i : i+1]})
			i++
		}
	}
	return out
}
