package analytics

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/embedkit/embedkit/chatstream"
)

// Model is the data model that the tools expose: views over the host's
// tables, each with its members (measures and dimensions) and its row
// filters. svcMeta searches it; svcSqlApi lets queries read its views and
// nothing else. A Model must not change once a tool uses it.
type Model struct {
	Views []View
}

// View is one queryable view of a [Model] (a "cube" of svcMeta's result).
type View struct {
	// Name is the SQL name queries use ("orders"). It shadows a table of
	// the same name: queries can read the view, never the table.
	Name  string
	Title string
	// Description says what one row is, for people and language models.
	Description string
	// SQL is the SELECT that defines the view over the host's tables, for
	// example "SELECT o.id, o.created_at, c.country FROM main.orders o JOIN
	// main.customers c ON c.id = o.customer_id". Qualify the host's tables
	// with "main." when a view shares their name.
	SQL string
	// Members are the view's columns and measures as svcMeta describes
	// them.
	Members []Member
	// Filters restrict the rows each user sees. All of them apply.
	Filters []RowFilter
}

// Member is a measure or dimension of a [View]. Name has the form
// <view>.<member>.
type Member struct {
	Name        string `json:"name"`
	Title       string `json:"title"`
	Description string `json:"description"`
	// Type is string, number, time or boolean.
	Type string `json:"type"`
	// AggType is set on measures: count, sum, avg, countDistinct, ...
	AggType string `json:"aggType,omitempty"`
}

// RowFilter is row-level security on a [View]: a row is visible to an
// external user only when the value of Column is one of the values of the
// user's attribute Attribute. A user without a value of the attribute sees
// no rows (the filter fails closed); an internal user sees every row.
type RowFilter struct {
	// Attribute is the user attribute's name ("country").
	Attribute string
	// Column is an SQL expression over the columns of the view's SQL
	// ("country").
	Column string
	// Normalize, when set, maps each attribute value to the form stored in
	// Column (for example "de" to "Germany"). A value it returns as "" is
	// dropped.
	Normalize func(string) string
}

// MetaResult is the result of the svcMeta tool.
type MetaResult struct {
	Cubes       []Cube `json:"cubes"`
	SearchQuery string `json:"searchQuery"`
}

// Cube is a view as svcMeta describes it.
type Cube struct {
	Name    string   `json:"name"`
	Type    string   `json:"type"` // always "view"
	Title   string   `json:"title"`
	Members []Member `json:"members"`
}

// Validate reports whether the model can be given to [NewMetaTool] and
// [NewSQLTool], which panic on an invalid model: it must have at least one
// view; view names must be plain SQL identifiers (letters, digits and _,
// not starting with a digit), unique regardless of case; every view must
// have SQL; every row filter must have an attribute and a column. Whether
// the views' SQL compiles against the database is checked by
// [NewSQLTool], which returns an error when it does not.
func (m *Model) Validate() error {
	if msg := m.check(); msg != "" {
		return errors.New("analytics: invalid model: " + msg)
	}
	return nil
}

// check returns what is wrong with the model, or "".
func (m *Model) check() string {
	if m == nil {
		return "the model must not be nil, got nil"
	}
	if len(m.Views) == 0 {
		return "the model must have at least one view, got none"
	}
	seen := map[string]bool{}
	for _, v := range m.Views {
		if !isIdent(v.Name) {
			return fmt.Sprintf("view name must be a plain SQL identifier, got %q", v.Name)
		}
		if seen[strings.ToLower(v.Name)] {
			return fmt.Sprintf("view names must be unique regardless of case, got %q twice", v.Name)
		}
		seen[strings.ToLower(v.Name)] = true
		if strings.TrimSpace(v.SQL) == "" {
			return fmt.Sprintf("view %q: SQL must not be empty, got %q", v.Name, v.SQL)
		}
		for _, f := range v.Filters {
			if f.Attribute == "" || f.Column == "" {
				return fmt.Sprintf("view %q: a row filter must have an attribute and a column, got attribute %q and column %q", v.Name, f.Attribute, f.Column)
			}
		}
	}
	return ""
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// filterKey names the values that row filter f, the j-th of the model's
// view i, compares its column with, in an Access and in the views' SQL:
// its attribute's values as they are, or, for a filter that normalizes
// them, its own. The two forms cannot meet, whatever the attribute's name.
func filterKey(i, j int, f RowFilter) string {
	if f.Normalize == nil {
		return "a:" + f.Attribute
	}
	return fmt.Sprintf("f:%d:%d", i, j)
}

// cubes returns the model as svcMeta shows it, in a new slice.
func (m *Model) cubes() []Cube {
	out := make([]Cube, len(m.Views))
	for i, v := range m.Views {
		out[i] = Cube{Name: v.Name, Type: "view", Title: v.Title, Members: slices.Clone(v.Members)}
	}
	return out
}

// searchStopWords match too much to narrow a search.
var searchStopWords = map[string]bool{
	"a": true, "an": true, "and": true, "by": true, "for": true, "in": true, "of": true,
	"on": true, "per": true, "the": true, "to": true, "top": true, "what": true, "which": true,
	"how": true, "many": true, "much": true, "is": true, "are": true, "me": true, "show": true,
}

// Search answers svcMeta: the views and members whose name, title or
// description contain a word of q (plurals match singulars). A view that
// matches by name or title keeps all its members. When nothing matches,
// or q has no searchable word, every view is returned.
func (m *Model) Search(q string) MetaResult {
	var words []string
	for _, w := range strings.FieldsFunc(strings.ToLower(q), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_')
	}) {
		if searchStopWords[w] || len(w) < 2 {
			continue
		}
		words = append(words, singular(w))
	}
	matches := func(s string) bool {
		s = strings.ToLower(s)
		return slices.ContainsFunc(words, func(w string) bool { return strings.Contains(s, w) })
	}
	var cubes []Cube
	for _, c := range m.cubes() {
		if matches(c.Name) || matches(c.Title) {
			cubes = append(cubes, c)
			continue
		}
		var ms []Member
		for _, mb := range c.Members {
			if matches(mb.Name) || matches(mb.Title) || matches(mb.Description) {
				ms = append(ms, mb)
			}
		}
		if len(ms) > 0 {
			c.Members = ms
			cubes = append(cubes, c)
		}
	}
	if len(cubes) == 0 {
		cubes = m.cubes()
	}
	return MetaResult{Cubes: cubes, SearchQuery: q}
}

// singular strips a plural ending so that "countries" finds "country".
func singular(w string) string {
	switch {
	case strings.HasSuffix(w, "ies") && len(w) > 4:
		return w[:len(w)-3] + "y"
	case strings.HasSuffix(w, "ss"):
		return w
	case strings.HasSuffix(w, "s") && len(w) > 3:
		return w[:len(w)-1]
	}
	return w
}

// Describe renders the model as text for a language model's system prompt:
// each view with its SQL name and its members. It says nothing about any
// user.
func (m *Model) Describe() string {
	var b strings.Builder
	b.WriteString("SQL views you can query (one SELECT per svcSqlApi call, in the SQL dialect its description names; no other tables exist for you):\n")
	for _, v := range m.Views {
		fmt.Fprintf(&b, "\n%s: %s", v.Name, v.Title)
		if v.Description != "" {
			b.WriteString(". " + v.Description)
		}
		b.WriteString("\n")
		for _, mb := range v.Members {
			col := mb.Name
			if _, after, ok := strings.Cut(mb.Name, "."); ok {
				col = after
			}
			fmt.Fprintf(&b, "- %s (%s", col, mb.Type)
			if mb.AggType != "" {
				fmt.Fprintf(&b, ", measure: %s", mb.AggType)
			}
			fmt.Fprintf(&b, "): %s", mb.Title)
			if mb.Description != "" {
				b.WriteString(". " + mb.Description)
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

// UserContext describes the asking user for a language model's system
// prompt: internal or external, and whether row filters limit the rows
// they see (and on which views). It states the restriction as a fact the
// model cannot change (the svcSqlApi executor enforces it whatever the SQL
// says). It names no filter value (not even whether the user has one), no
// group, identifier, e-mail or security context: the model does not need
// them to write SQL, and whatever reaches the model reaches its provider.
func (m *Model) UserContext(t chatstream.Turn) string {
	if AccessOf(m, t.User).all {
		return "The user is an internal user; no row filters apply."
	}
	var filtered []string
	for _, v := range m.Views {
		if len(v.Filters) > 0 {
			filtered = append(filtered, v.Name)
		}
	}
	if len(filtered) == 0 {
		return "The user is an external (embedded) user; no row filters apply."
	}
	return "The user is an external (embedded) user. Row filters apply to the views " + strings.Join(filtered, ", ") +
		": the data layer limits their rows to what this user may see, whatever the query says, so a result may be " +
		"smaller than the whole data set or empty; say so when it matters, and do not try to work around it."
}

// Access is the row access of one user: every row (an internal user), or
// for each row filter the values whose rows they may see.
type Access struct {
	all    bool
	values map[string][]any  // filterKey → values (string or float64)
	first  map[string]string // attribute → filterKey of its first filter
}

// AccessOf derives the row access of u under the filters of m. An internal
// user (InternalID set) sees every row. For an external user, each row
// filter takes the values of its attribute: a string or number, or a list
// of them, each string normalized by that filter's Normalize; a missing,
// empty or otherwise typed value contributes nothing, so the filter yields
// no rows.
func AccessOf(m *Model, u chatstream.User) Access {
	if u.InternalID != "" && u.ExternalID == "" {
		return Access{all: true}
	}
	a := Access{values: map[string][]any{}, first: map[string]string{}}
	for i, v := range m.Views {
		for j, f := range v.Filters {
			k := filterKey(i, j, f)
			if _, ok := a.first[f.Attribute]; !ok {
				a.first[f.Attribute] = k
			}
			if _, ok := a.values[k]; !ok {
				a.values[k] = filterValues(u.Attributes[f.Attribute], f.Normalize)
			}
		}
	}
	return a
}

// filterValues returns the distinct values of attribute value v that a
// row filter compares with, strings normalized by norm (when set).
func filterValues(v any, norm func(string) string) []any {
	var vals []any
	add := func(v any) {
		if s, ok := v.(string); ok {
			if norm != nil {
				s = norm(s)
			}
			if s == "" {
				return
			}
			v = s
		}
		if !slices.Contains(vals, v) {
			vals = append(vals, v)
		}
	}
	switch v := v.(type) {
	case string:
		add(v)
	case float64:
		add(v)
	case []string:
		for _, s := range v {
			add(s)
		}
	case []float64:
		for _, f := range v {
			add(f)
		}
	case []any:
		for _, e := range v {
			switch e.(type) {
			case string, float64:
				add(e)
			}
		}
	}
	return vals
}

// All reports whether the access covers every row.
func (a Access) All() bool { return a.all }

// Values returns the values of attr this access is limited to, as the
// first row filter on attr takes them (normalized by its Normalize); nil
// for an access that covers every row.
func (a Access) Values(attr string) []any {
	k, ok := a.first[attr]
	if !ok {
		return nil
	}
	return slices.Clone(a.values[k])
}

// key identifies the access in cache keys and result ids.
func (a Access) key() string {
	if a.all {
		return "*"
	}
	attrs := make([]string, 0, len(a.values))
	for k := range a.values {
		attrs = append(attrs, k)
	}
	slices.Sort(attrs)
	var b strings.Builder
	for _, k := range attrs {
		enc, _ := json.Marshal(a.values[k])
		fmt.Fprintf(&b, "%q=%s;", k, enc)
	}
	return b.String()
}
