// Package provision provisions the user named by a generate-session request
// or a chat request's sessionSettings: one validated [Request], applied inside
// the caller's transaction by [Apply], so that both endpoints follow exactly
// the same rules.
package provision

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/embedkit/embedkit/internal/wire"
	"github.com/embedkit/embedkit/store"
)

// Request is the identity part of a generate-session request or of a chat
// request's sessionSettings. Pointer and "Sent" fields tell an omitted field
// from an empty one.
type Request struct {
	// Fields is prepended to the field names in error messages
	// ("sessionSettings." in chat).
	Fields string

	ExternalID  string
	InternalID  string
	Email       *string
	DisplayName *string
	Picture     *string
	// ProfileSent tells a userProfile object that was sent, even empty,
	// from an omitted (or null) one.
	ProfileSent bool
	// Attributes are the userAttributes entries; nil when the field was
	// omitted.
	Attributes []AttributeInput
	// Groups are the group names; GroupsSent tells an omitted field (keep
	// memberships) from an empty array (clear them).
	Groups     []string
	GroupsSent bool
	// SecurityContext is a JSON object, or nil when omitted.
	SecurityContext json.RawMessage

	CreatorMode          bool
	EmbedTenantName      string
	GroupDefinitions     []store.GroupDef
	AttributeDefinitions []store.AttributeDef

	// KnownEmbedTenant, when its ID is set and it matches the account and
	// the requested name, is used instead of looking the embed tenant up
	// (embed tenants are never deleted, so a caller may cache them). Zero
	// value: look it up, creating it on first use.
	KnownEmbedTenant store.EmbedTenant
	// KnownDefinitions, when set, are the definitions of the request's
	// scope that its attribute and group names resolve to, from a cache of
	// the caller; they replace the Lookup of a request that defines nothing
	// and whose deployment is known. Every name must be present.
	KnownDefinitions *store.LookupResult
	// DeploymentID, when not zero, is a deployment of the account the
	// request must name: a missing one is [ErrDeploymentNotFound], before
	// anything else is checked.
	DeploymentID int64
	// MaxEmbedTenants is the account's limit of embed tenants: creating one
	// more is 403. Zero or less: no limit.
	MaxEmbedTenants int
	// MaxNewEphemeralPerMinute is the account's limit of ephemeral users
	// created per clock minute (a fixed window shared through the store):
	// one more is 429 with Retry-After. Zero or less: no limit.
	MaxNewEphemeralPerMinute int

	// Persistent makes an external user persistent (generate-session, chat
	// with isEphemeral false); otherwise a new user is ephemeral until
	// EphemeralExpiresAt.
	Persistent         bool
	EphemeralExpiresAt time.Time

	// Session, when set, is a session id that Apply stores for the user
	// with its provisioning (generate-session), in the resolved embed
	// tenant: the one named, or the account's default by name when the
	// request needs none (it is created only when used).
	Session *store.NewSession
}

// ErrDeploymentNotFound answers a request whose deployment the account
// does not have.
var ErrDeploymentNotFound = wire.Errorf(http.StatusNotFound, "deployment not found")

// AttributeInput is one userAttributes entry as received.
type AttributeInput struct {
	Name  string
	Value json.RawMessage // JSON null clears; nil (field omitted) is rejected by Validate
}

// Result is the provisioned user and the scope its groups and attributes
// were resolved in.
type Result struct {
	User store.User
	// EmbedTenant is the session's embed tenant (the named one, or the
	// account's default).
	EmbedTenant store.EmbedTenant
	// Scope is the catalog the request's names resolved against: the embed
	// tenant's in creator mode, else the tenant-wide one.
	Scope store.Scope
	// Found are the definitions the names resolved to, when read from the
	// store (not from KnownDefinitions).
	Found *store.LookupResult
}

// Limits of a request's fields. Lengths count characters (Unicode code
// points, not bytes: a body is valid UTF-8 by then); a value over its limit
// is a 400 naming the field.
const (
	// MaxName bounds externalId, internalId, group names and attribute
	// names.
	MaxName = 255
	// MaxEmail bounds email.
	MaxEmail = 320
	// MaxDisplayName bounds userProfile.displayName.
	MaxDisplayName = 255
	// MaxPicture bounds userProfile.picture.
	MaxPicture = 2048
	// MaxDefinitionText bounds the description, displayName and
	// defaultValue of group and attribute definitions.
	MaxDefinitionText = 1024
	// MaxStringValue bounds a string attribute value, and each string of a
	// string-array value.
	MaxStringValue = 1024
	// MaxArrayItems bounds the items of an array attribute value.
	MaxArrayItems = 1000
	// MaxNumber bounds the characters of a number attribute value, and of
	// each number of a number-array value, and MaxExponent the magnitude
	// of its exponent (every float64 can be written within both), so that
	// every database stores it as sent (PostgreSQL's jsonb refuses a
	// number of more than 16,383 fraction digits, such as 1e-20000).
	MaxNumber   = 64
	MaxExponent = 400
	// MaxEntries bounds the entries of groups, userAttributes,
	// groupDefinitions and userAttributeDefinitions.
	MaxEntries = 500
)

// tooLong reports whether s has more than n characters.
func tooLong(s string, n int) bool {
	return len(s) > n && utf8.RuneCountInString(s) > n
}

var tenantNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{3,34}[a-z0-9]$`)

// ValidEmbedTenantName reports whether name follows the spec's rules:
// lowercase, 5 to 36 characters, starts with a letter, ends with a letter or
// digit, only a-z, 0-9 and '-'.
func ValidEmbedTenantName(name string) bool { return tenantNameRE.MatchString(name) }

// CheckText returns a 400 *wire.Error naming the first string field of r
// that is not valid UTF-8. Bodies decoded by the server always pass (the
// decoder refuses such text); Go clients call it before encoding a request,
// because encoding/json would silently replace invalid bytes with U+FFFD.
func (r *Request) CheckText() error {
	prefix := r.Fields
	bad := func(field string) error {
		return wire.BadRequest("%s%s must be valid UTF-8", prefix, field)
	}
	for _, f := range []struct {
		name string
		v    string
	}{{"externalId", r.ExternalID}, {"internalId", r.InternalID}, {"embedTenantName", r.EmbedTenantName}} {
		if !utf8.ValidString(f.v) {
			return bad(f.name)
		}
	}
	for _, f := range []struct {
		name string
		v    *string
	}{{"email", r.Email}, {"userProfile.displayName", r.DisplayName}, {"userProfile.picture", r.Picture}} {
		if f.v != nil && !utf8.ValidString(*f.v) {
			return bad(f.name)
		}
	}
	if !utf8.Valid(r.SecurityContext) {
		return bad("securityContext")
	}
	for i, g := range r.Groups {
		if !utf8.ValidString(g) {
			return bad(fmt.Sprintf("groups[%d]", i))
		}
	}
	for i, a := range r.Attributes {
		if !utf8.ValidString(a.Name) {
			return bad(fmt.Sprintf("userAttributes[%d].name", i))
		}
		if !utf8.Valid(a.Value) {
			return bad(fmt.Sprintf("userAttributes[%d].value", i))
		}
	}
	opt := func(s *string) bool { return s == nil || utf8.ValidString(*s) }
	for i, d := range r.GroupDefinitions {
		if !utf8.ValidString(d.Name) || !opt(d.Description) {
			return bad(fmt.Sprintf("groupDefinitions[%d]", i))
		}
	}
	for i, d := range r.AttributeDefinitions {
		if !utf8.ValidString(d.Name) || !utf8.ValidString(string(d.Type)) || !opt(d.DisplayName) || !opt(d.DefaultValue) || !opt(d.Description) {
			return bad(fmt.Sprintf("userAttributeDefinitions[%d]", i))
		}
	}
	return nil
}

// Validate checks the rules that need no database and returns a 400
// *wire.Error naming the field (after r.Fields). An email sent with internalId is ignored,
// and so is a field it forbids sent as null (null counts as omitted).
func (r *Request) Validate() error {
	prefix := r.Fields
	if err := r.CheckText(); err != nil {
		return err
	}
	switch {
	case r.ExternalID == "" && r.InternalID == "":
		return wire.BadRequest("exactly one of %sexternalId or %sinternalId is required", prefix, prefix)
	case r.ExternalID != "" && r.InternalID != "":
		return wire.BadRequest("exactly one of %sexternalId or %sinternalId is allowed, not both", prefix, prefix)
	}
	for _, c := range []struct {
		name string
		n    int
	}{
		{"groups", len(r.Groups)},
		{"userAttributes", len(r.Attributes)},
		{"groupDefinitions", len(r.GroupDefinitions)},
		{"userAttributeDefinitions", len(r.AttributeDefinitions)},
	} {
		if c.n > MaxEntries {
			return wire.BadRequest("%s%s must have at most %d entries", prefix, c.name, MaxEntries)
		}
	}
	if r.ExternalID != "" {
		if tooLong(r.ExternalID, MaxName) {
			return wire.BadRequest("%sexternalId must be at most %d characters", prefix, MaxName)
		}
		// The spec's rule, lowercase and trimmed: "john doe" is an id.
		// Control characters (a tab, a line break) are refused too: no
		// caller means one in an id, and they would garble every log and
		// admin listing that shows it.
		if r.ExternalID != strings.ToLower(strings.TrimSpace(r.ExternalID)) {
			return wire.BadRequest("%sexternalId must be lowercase and trimmed", prefix)
		}
		if strings.IndexFunc(r.ExternalID, unicode.IsControl) >= 0 {
			return wire.BadRequest("%sexternalId must not contain control characters", prefix)
		}
	}
	if tooLong(r.InternalID, MaxName) {
		return wire.BadRequest("%sinternalId must be at most %d characters", prefix, MaxName)
	}
	for _, f := range []struct {
		name string
		v    *string
		max  int
	}{
		{"email", r.Email, MaxEmail},
		{"userProfile.displayName", r.DisplayName, MaxDisplayName},
		{"userProfile.picture", r.Picture, MaxPicture},
	} {
		if f.v != nil && tooLong(*f.v, f.max) {
			return wire.BadRequest("%s%s must be at most %d characters", prefix, f.name, f.max)
		}
	}
	if r.InternalID != "" {
		forbidden := []struct {
			name string
			sent bool
		}{
			{"groups", r.GroupsSent},
			{"userAttributes", r.Attributes != nil},
			{"groupDefinitions", r.GroupDefinitions != nil},
			{"userAttributeDefinitions", r.AttributeDefinitions != nil},
			{"securityContext", r.SecurityContext != nil && strings.TrimSpace(string(r.SecurityContext)) != "null"},
			{"userProfile", r.ProfileSent || r.DisplayName != nil || r.Picture != nil},
		}
		for _, f := range forbidden {
			if f.sent {
				return wire.BadRequest("%s%s is not allowed with internalId: the internal user's existing permissions apply", prefix, f.name)
			}
		}
	}
	if r.Picture != nil && *r.Picture != "" && !validPictureURL(*r.Picture) {
		return wire.BadRequest("%suserProfile.picture must be an absolute http:// or https:// URL", prefix)
	}
	if r.EmbedTenantName != "" && !ValidEmbedTenantName(r.EmbedTenantName) {
		return wire.BadRequest("%sembedTenantName must be lowercase, 5 to 36 characters of a-z, 0-9 and '-', start with a letter and end with a letter or digit", prefix)
	}
	if r.SecurityContext != nil {
		if b := strings.TrimSpace(string(r.SecurityContext)); !strings.HasPrefix(b, "{") && b != "null" {
			return wire.BadRequest("%ssecurityContext must be a JSON object", prefix)
		}
	}

	seen := make(map[string]bool, len(r.Attributes))
	for i, a := range r.Attributes {
		if a.Name == "" {
			return wire.BadRequest("%suserAttributes[%d].name is required", prefix, i)
		}
		if tooLong(a.Name, MaxName) { // before a message quotes it
			return wire.BadRequest("%suserAttributes[%d].name must be at most %d characters", prefix, i, MaxName)
		}
		if seen[a.Name] {
			return wire.BadRequest("%suserAttributes has duplicate name %q", prefix, a.Name)
		}
		seen[a.Name] = true
		if a.Value == nil {
			return wire.BadRequest("%suserAttributes[%d].value is required (null clears the value)", prefix, i)
		}
		if _, err := valueKind(a.Value); err != nil {
			return wire.BadRequest("%suserAttributes[%d].value must be a string, number, string array, number array or null", prefix, i)
		}
		if field, limit := valueOverLimit(a.Value); limit != "" {
			return wire.BadRequest("%suserAttributes[%d].value%s %s", prefix, i, field, limit)
		}
	}
	clear(seen)
	for i, g := range r.Groups {
		if g == "" || tooLong(g, MaxName) {
			return wire.BadRequest("%sgroups[%d] must be 1 to %d characters", prefix, i, MaxName)
		}
		if seen[g] {
			return wire.BadRequest("%sgroups has duplicate name %q", prefix, g)
		}
		seen[g] = true
	}
	clear(seen)
	for i, d := range r.GroupDefinitions {
		if tooLong(d.Name, MaxName) {
			return wire.BadRequest("%sgroupDefinitions[%d].name must be at most %d characters", prefix, i, MaxName)
		}
		if d.Description != nil && tooLong(*d.Description, MaxDefinitionText) {
			return wire.BadRequest("%sgroupDefinitions[%d].description must be at most %d characters", prefix, i, MaxDefinitionText)
		}
	}
	for i, d := range r.AttributeDefinitions {
		if tooLong(d.Name, MaxName) {
			return wire.BadRequest("%suserAttributeDefinitions[%d].name must be at most %d characters", prefix, i, MaxName)
		}
		for _, f := range []struct {
			name string
			v    *string
		}{{"displayName", d.DisplayName}, {"defaultValue", d.DefaultValue}, {"description", d.Description}} {
			if f.v != nil && tooLong(*f.v, MaxDefinitionText) {
				return wire.BadRequest("%suserAttributeDefinitions[%d].%s must be at most %d characters", prefix, i, f.name, MaxDefinitionText)
			}
		}
	}

	if (r.GroupDefinitions != nil || r.AttributeDefinitions != nil) && !r.CreatorMode {
		return wire.BadRequest("%sgroupDefinitions and %suserAttributeDefinitions require %screatorMode true", prefix, prefix, prefix)
	}
	if (r.GroupDefinitions != nil || r.AttributeDefinitions != nil) && r.EmbedTenantName == "" {
		return wire.BadRequest("%sgroupDefinitions and %suserAttributeDefinitions require %sembedTenantName", prefix, prefix, prefix)
	}
	for i, d := range r.GroupDefinitions {
		if d.Name == "" {
			return wire.BadRequest("%sgroupDefinitions[%d].name is required", prefix, i)
		}
		if seen[d.Name] {
			return wire.BadRequest("%sgroupDefinitions has duplicate name %q", prefix, d.Name)
		}
		seen[d.Name] = true
	}
	clear(seen)
	for i, d := range r.AttributeDefinitions {
		if d.Name == "" {
			return wire.BadRequest("%suserAttributeDefinitions[%d].name is required", prefix, i)
		}
		if !d.Type.Valid() {
			return wire.BadRequest("%suserAttributeDefinitions[%d].type must be one of string, number, string_array, number_array", prefix, i)
		}
		if seen[d.Name] {
			return wire.BadRequest("%suserAttributeDefinitions has duplicate name %q", prefix, d.Name)
		}
		seen[d.Name] = true
	}
	return nil
}

// validPictureURL reports whether s is an absolute http(s) URL whose host
// is a name (RFC 3986's reg-name, with non-ASCII letters as in an IRI) or
// a bracketed IPv6 address without a zone, and whose port, if any, is at
// most 65535. Go's url.Parse alone takes an empty host (":80") and a host
// with '<', '>' or '"', which no browser loads.
func validPictureURL(s string) bool {
	u, err := url.Parse(s)
	if err != nil || u.Opaque != "" || u.Scheme != "http" && u.Scheme != "https" {
		return false
	}
	host := u.Hostname()
	if host == "" {
		return false
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n > 65535 {
			return false
		}
	}
	if strings.HasPrefix(u.Host, "[") {
		ip, err := netip.ParseAddr(host)
		return err == nil && ip.Is6() && ip.Zone() == ""
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if c < utf8.RuneSelf && !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~!$&'()*+,;=", c) >= 0) {
			return false
		}
	}
	return utf8.ValidString(host)
}

// valueKind returns the attribute type a JSON value fits, "" for null.
// An empty array fits both array types and reports TypeStringArray with
// ok-any semantics handled by fits.
func valueKind(v json.RawMessage) (store.AttributeType, error) {
	s := strings.TrimSpace(string(v))
	if s == "" || s == "null" {
		return "", nil
	}
	switch s[0] {
	case '"':
		// Valid JSON starting with a quote is a string: json.Valid checks
		// what decoding it would, without decoding.
		if !json.Valid(v) {
			return "", errBadValue
		}
		return store.TypeString, nil
	case '[':
		var xs []json.RawMessage
		if err := json.Unmarshal(v, &xs); err != nil {
			return "", err
		}
		if len(xs) == 0 {
			return "[]", nil
		}
		var kind store.AttributeType
		for _, x := range xs {
			k, err := valueKind(x)
			if err != nil || (k != store.TypeString && k != store.TypeNumber) {
				return "", errBadValue
			}
			if kind != "" && k != kind {
				return "", errBadValue
			}
			kind = k
		}
		if kind == store.TypeString {
			return store.TypeStringArray, nil
		}
		return store.TypeNumberArray, nil
	case '{', 't', 'f':
		return "", errBadValue
	default:
		// A JSON number; whether a float64 holds it is valueOverLimit's
		// to say, with its own message.
		if !json.Valid(v) {
			return "", errBadValue
		}
		return store.TypeNumber, nil
	}
}

var errBadValue = errors.New("bad attribute value")

// valueOverLimit checks a value that valueKind accepted against
// MaxStringValue, MaxArrayItems, MaxNumber and MaxExponent. It returns the
// offending part ("" for the value itself, "[7]" for an item) and what it
// must be; limit is "" when the value is within the limits.
func valueOverLimit(v json.RawMessage) (field, limit string) {
	s := strings.TrimSpace(string(v))
	if s == "" {
		return "", ""
	}
	switch s[0] {
	case '"':
		var x string
		// Decoding never lengthens a string: a short one is within its limit.
		if len(v) > MaxStringValue+2 && json.Unmarshal(v, &x) == nil && tooLong(x, MaxStringValue) {
			return "", fmt.Sprintf("must be at most %d characters", MaxStringValue)
		}
	case '[':
		if len(v) <= MaxNumber && !bytes.ContainsAny(v, "eE") {
			return "", "" // short strings, numbers without an exponent
		}
		var xs []json.RawMessage
		if json.Unmarshal(v, &xs) != nil {
			return "", ""
		}
		if len(xs) > MaxArrayItems {
			return "", fmt.Sprintf("must have at most %d items", MaxArrayItems)
		}
		for i, x := range xs {
			var item string
			switch {
			case len(x) > 0 && x[0] == '"':
				if json.Unmarshal(x, &item) == nil && tooLong(item, MaxStringValue) {
					return fmt.Sprintf("[%d]", i), fmt.Sprintf("must be at most %d characters", MaxStringValue)
				}
			default:
				if limit := numberOverLimit(string(x)); limit != "" {
					return fmt.Sprintf("[%d]", i), limit
				}
			}
		}
	case 'n': // null
	default:
		return "", numberOverLimit(s)
	}
	return "", ""
}

var (
	numberLimit = fmt.Sprintf("must be a number of at most %d characters, with an exponent of at most %d in magnitude", MaxNumber, MaxExponent)
	floatLimit  = "must be a number a 64-bit float can hold (at most 1.7976931348623157e308 in magnitude)"
)

// numberOverLimit returns what n, a JSON number, must be when it is over
// MaxNumber or MaxExponent, or beyond a float64 (1e400); "" when it is
// within them.
func numberOverLimit(n string) string {
	if len(n) > MaxNumber {
		return numberLimit
	}
	if i := strings.IndexAny(n, "eE"); i >= 0 {
		if e, err := strconv.Atoi(n[i+1:]); err != nil || e > MaxExponent || e < -MaxExponent {
			return numberLimit
		}
	}
	if _, err := strconv.ParseFloat(n, 64); err != nil {
		return floatLimit
	}
	return ""
}

func fits(kind, def store.AttributeType) bool {
	if kind == "[]" {
		return def == store.TypeStringArray || def == store.TypeNumberArray
	}
	return kind == def
}

// OneWrite reports whether Apply writes at most one thing for r: no
// definitions, no embed tenant or a known one, and either an external
// user (with its Session) or an internal user without a Session (which
// Apply only reads). Such a provisioning needs no transaction of its own
// (Apply may run on the store itself), as the store makes each of its
// writes atomic.
func (r Request) OneWrite() bool {
	known := r.KnownEmbedTenant.ID != 0 && r.KnownEmbedTenant.Name == cmp.Or(r.EmbedTenantName, store.DefaultEmbedTenant)
	return (r.InternalID == "" || r.Session == nil) && (known || !r.CreatorMode && r.EmbedTenantName == "") &&
		len(r.GroupDefinitions)+len(r.AttributeDefinitions) == 0
}

// MayHold reports whether r may write nothing new on the existing user u,
// as far as u alone tells: r only sets attribute values and memberships of
// an external user (it sends no profile field or security context, clears
// no value, defines nothing, names no embed tenant or deployment, stores no
// session) and does not make an ephemeral u persistent. [Request.Holds] decides with the
// user's attributes and groups. A request that sends profile fields is
// always written: comparing them with u, read before the attributes and
// groups, would mix two moments of the user.
func (r Request) MayHold(u store.User) bool {
	for _, in := range r.Attributes {
		if kind, _ := valueKind(in.Value); kind == "" { // clearing needs its definition checked
			return false
		}
	}
	return r.ExternalID != "" && r.Email == nil && r.DisplayName == nil && r.Picture == nil && r.SecurityContext == nil &&
		r.Session == nil && !r.CreatorMode && r.EmbedTenantName == "" && r.DeploymentID == 0 &&
		len(r.GroupDefinitions)+len(r.AttributeDefinitions) == 0 && !(r.Persistent && u.Ephemeral)
}

// Holds reports whether applying r to the existing user u, which holds d in
// the account's tenant-wide scope, would write nothing new ([Request.MayHold],
// and every attribute value and the memberships r sends are in d already).
// Such a request needs no write, and no check either: what u holds was
// checked when it was written. It is then as if applied when d was read,
// everything it sends being in that one read. Whatever is in doubt counts
// as a change, for Apply to check and write: a value stored in another
// form (compared as compact JSON).
func (r Request) Holds(u store.User, d store.UserData) bool {
	if !r.MayHold(u) {
		return false
	}
	for _, in := range r.Attributes {
		i := slices.IndexFunc(d.Attributes, func(a store.UserAttribute) bool { return a.Name == in.Name })
		if i < 0 || !bytes.Equal(compact(in.Value), compact(d.Attributes[i].Value)) {
			return false
		}
	}
	if r.GroupsSent {
		have := make([]string, len(d.Groups))
		for i, g := range d.Groups {
			have[i] = g.Name
		}
		slices.Sort(have) // the store's order may follow a collation
		if !slices.Equal(have, slices.Compact(slices.Sorted(slices.Values(r.Groups)))) {
			return false
		}
	}
	return true
}

// session is r.Session in the embed tenant of res, or nil.
func (r Request) session(res Result) *store.NewSession {
	if r.Session == nil {
		return nil
	}
	ns := *r.Session
	ns.Session.UserID = res.User.ID
	ns.Session.EmbedTenantID = res.EmbedTenant.ID
	ns.Session.EmbedTenantName = cmp.Or(res.EmbedTenant.Name, store.DefaultEmbedTenant)
	return &ns
}

// Run applies r on st atomically: on the store itself when r writes at
// most one thing ([Request.OneWrite]; each of the store's writes is
// atomic), else in one transaction. The account's limit of persistent
// external users applies.
func Run(ctx context.Context, st store.Store, acct store.Account, r Request, now time.Time) (res Result, err error) {
	apply := func(tx store.Tx) (err error) {
		res, err = Apply(ctx, tx, acct, r, acct.ExternalUserLimit(), now)
		return err
	}
	if r.OneWrite() {
		err = apply(st)
	} else {
		err = st.InTx(ctx, apply)
	}
	return res, err
}

// Apply provisions the user of a validated request inside tx: it upserts the
// creator-mode definitions first, then reads the definitions the request
// names (and its deployment) in one [store.Catalog.Lookup], validates, and
// writes the user with its attribute values and memberships in one
// [store.Users.UpsertUser], with r.Session if set. Failures are *wire.Error
// values with the spec's messages; any error means the caller must roll
// back. maxUsers is the account's limit of persistent external users.
func Apply(ctx context.Context, tx store.Tx, acct store.Account, r Request, maxUsers int, now time.Time) (Result, error) {
	res := Result{Scope: store.TenantWide(acct.ID)}
	look := store.Lookup{Scope: res.Scope, DeploymentID: r.DeploymentID}
	var attrNames, groupNames []string
	if r.InternalID == "" {
		attrNames, groupNames = r.names()
	}
	// The embed tenant: known to the caller, or looked up with the rest.
	defining := len(r.GroupDefinitions)+len(r.AttributeDefinitions) > 0
	tenant := ""
	if r.CreatorMode || r.EmbedTenantName != "" {
		tenant = cmp.Or(r.EmbedTenantName, store.DefaultEmbedTenant)
		if k := r.KnownEmbedTenant; k.ID != 0 && k.AccountID == acct.ID && k.Name == tenant {
			res.EmbedTenant, tenant = k, ""
			if r.CreatorMode {
				res.Scope = store.Scope{AccountID: acct.ID, EmbedTenantID: k.ID}
				look.Scope = res.Scope
			}
		} else {
			look.EmbedTenantName, look.InEmbedTenant = tenant, r.CreatorMode
		}
	}
	// One Lookup reads the deployment, the embed tenant and the names, so
	// that the deployment is checked before anything else; a request that
	// defines names looks them up once they are written.
	var found store.LookupResult
	names := attrNames != nil || groupNames != nil
	if !defining {
		look.AttrNames, look.GroupNames = attrNames, groupNames
	}
	if k := r.KnownDefinitions; k != nil && look.DeploymentID == 0 && tenant == "" && !defining && inScope(*k, res.Scope) {
		found = *k
	} else if look.DeploymentID != 0 || look.EmbedTenantName != "" || look.AttrNames != nil || look.GroupNames != nil {
		var err error
		if found, err = tx.Lookup(ctx, look); err != nil {
			return Result{}, err
		}
		if names && !defining {
			res.Found = &found
		}
	}
	if look.DeploymentID != 0 && !found.DeploymentFound {
		return Result{}, ErrDeploymentNotFound
	}
	if r.CreatorMode && !acct.UseCreatorMode {
		return Result{}, wire.Errorf(http.StatusForbidden, "creatorMode requires the useCreatorMode tenant flag")
	}
	if r.InternalID != "" { // read before its embed tenant is created
		u, err := tx.UserByKey(ctx, store.UserKey{AccountID: acct.ID, InternalID: r.InternalID}, now)
		if errors.Is(err, store.ErrNotFound) {
			return Result{}, wire.BadRequest("%sinternalId: internal user %q not found", r.Fields, r.InternalID)
		}
		if err != nil {
			return Result{}, err
		}
		res.User = u
	}
	if tenant != "" {
		et := found.EmbedTenant
		if !found.EmbedTenantFound {
			var err error
			if et, err = ensureTenant(ctx, tx, acct, tenant, r); err != nil {
				return Result{}, err
			}
		}
		res.EmbedTenant = et
		if r.CreatorMode {
			res.Scope = store.Scope{AccountID: acct.ID, EmbedTenantID: et.ID}
		}
	}
	if r.InternalID != "" {
		var err error
		res.Scope = store.TenantWide(acct.ID)
		if ns := r.session(res); ns != nil {
			err = tx.CreateSession(ctx, ns.Hash, ns.Session)
		}
		return res, err
	}

	// Definitions first, so that one request may define and use a name.
	if defining {
		if err := tx.UpsertDefinitions(ctx, res.Scope, r.GroupDefinitions, r.AttributeDefinitions); err != nil {
			return Result{}, err
		}
		look = store.Lookup{Scope: res.Scope, AttrNames: attrNames, GroupNames: groupNames}
		if names {
			var err error
			if found, err = tx.Lookup(ctx, look); err != nil {
				return Result{}, err
			}
			res.Found = &found
		}
	}
	if len(r.AttributeDefinitions) > 0 {
		types := make(map[string]store.AttributeType, len(found.Attributes))
		for _, a := range found.Attributes {
			types[a.Name] = a.Type
		}
		for _, d := range r.AttributeDefinitions {
			if t, ok := types[d.Name]; ok && t != d.Type {
				return Result{}, wire.Errorf(http.StatusConflict, "cannot change type")
			}
		}
	}

	up := store.UserUpsert{
		UserKey:               store.UserKey{AccountID: acct.ID, ExternalID: r.ExternalID},
		Email:                 r.Email,
		DisplayName:           r.DisplayName,
		Picture:               r.Picture,
		SecurityContext:       r.SecurityContext,
		Persistent:            r.Persistent,
		EphemeralExpiresAt:    r.EphemeralExpiresAt,
		MaxUsers:              maxUsers,
		NewEphemeralPerMinute: r.MaxNewEphemeralPerMinute,
		Now:                   now,
	}
	if string(up.SecurityContext) == "null" {
		up.SecurityContext = json.RawMessage("{}")
	}
	var err error
	if up.Attributes, up.Groups, err = resolve(r, found, groupNames); err != nil {
		return Result{}, err
	}
	if r.GroupsSent {
		up.SetGroups, up.GroupScope = true, res.Scope
	}

	up.Session = r.session(res)
	u, err := tx.UpsertUser(ctx, up)
	if errors.Is(err, store.ErrLimit) {
		if r.Persistent {
			return Result{}, wire.Limited("maxExternalUsers", wire.Errorf(http.StatusForbidden, "external user limit of %d reached for this account", maxUsers))
		}
		end := now.Truncate(time.Minute).Add(time.Minute)
		return Result{}, wire.Limited("newEphemeralUsersPerMinute", wire.TooMany(end.Sub(now), "new ephemeral user limit of %d per minute reached for this account: try again later", r.MaxNewEphemeralPerMinute))
	}
	if err != nil {
		return Result{}, err
	}
	res.User = u
	return res, nil
}

// resolve checks the attribute values and group names of r against
// found, the definitions of r's scope that it names, and returns the
// values and the ids of the groups (not nil when r sends groups) to store.
func resolve(r Request, found store.LookupResult, groupNames []string) (vals []store.AttributeValue, groups []int64, err error) {
	attrs := make(map[string]store.Attribute, len(found.Attributes))
	for _, a := range found.Attributes {
		attrs[a.Name] = a
	}
	for _, in := range r.Attributes {
		def, ok := attrs[in.Name]
		if !ok {
			return nil, nil, wire.BadRequest("User attributes not found")
		}
		kind, _ := valueKind(in.Value) // validated
		v := store.AttributeValue{AttributeID: def.ID}
		if kind != "" {
			if !fits(kind, def.Type) {
				return nil, nil, wire.BadRequest("the value of attribute %q must be of type %s", in.Name, def.Type)
			}
			v.Value = compact(in.Value)
		}
		vals = append(vals, v)
	}
	if !r.GroupsSent {
		return vals, nil, nil
	}
	groups = []int64{}
	byName := make(map[string]int64, len(found.Groups))
	for _, g := range found.Groups {
		byName[g.Name] = g.ID
	}
	var missing []string
	for _, n := range groupNames {
		if id, ok := byName[n]; ok {
			groups = append(groups, id)
		} else {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return nil, nil, wire.BadRequest("Groups with names %s not found", strings.Join(missing, ", "))
	}
	return vals, groups, nil
}

// CheckNames checks, with the messages Apply gives, that the attributes
// and groups r names exist in scope and that r's values fit their types,
// and writes nothing: for sessionSettings that are validated but not
// applied (those of a session's own token, of a request without input).
func CheckNames(ctx context.Context, rd store.Tx, scope store.Scope, r Request) error {
	attrNames, groupNames := r.names()
	if attrNames == nil && groupNames == nil {
		return nil
	}
	found, err := rd.Lookup(ctx, store.Lookup{Scope: scope, AttrNames: attrNames, GroupNames: groupNames})
	if err != nil {
		return err
	}
	_, _, err = resolve(r, found, groupNames)
	return err
}

// names are the attribute and group names r refers to, each once (nil:
// none).
func (r Request) names() (attrs, groups []string) {
	for _, a := range r.Attributes {
		attrs = append(attrs, a.Name)
	}
	for _, d := range r.AttributeDefinitions {
		if !slices.Contains(attrs, d.Name) {
			attrs = append(attrs, d.Name)
		}
	}
	if r.GroupsSent && len(r.Groups) > 0 {
		groups = slices.Compact(slices.Sorted(slices.Values(r.Groups)))
	}
	return attrs, groups
}

// ensureTenant creates the embed tenant name, which Apply's Lookup did not
// find, under the account's limit.
func ensureTenant(ctx context.Context, tx store.Tx, acct store.Account, name string, r Request) (store.EmbedTenant, error) {
	et, err := tx.EnsureEmbedTenant(ctx, acct.ID, name, r.MaxEmbedTenants)
	if errors.Is(err, store.ErrLimit) {
		return store.EmbedTenant{}, wire.Limited("embedTenants", wire.Errorf(http.StatusForbidden, "embed tenant limit of %d reached for this account", r.MaxEmbedTenants))
	}
	return et, err
}

// inScope reports whether every definition of r belongs to scope s.
func inScope(r store.LookupResult, s store.Scope) bool {
	for _, a := range r.Attributes {
		if a.Scope != s {
			return false
		}
	}
	for _, g := range r.Groups {
		if g.Scope != s {
			return false
		}
	}
	return true
}

func compact(v json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return v
	}
	return b.Bytes()
}
