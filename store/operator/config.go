package operator

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/embedkit/embedkit/internal/wire"
	"github.com/embedkit/embedkit/store"
)

// Config is the bootstrap document: the accounts a host sets up from its own
// configuration file, applied with [Operator.Apply]. Its JSON form:
//
//	{
//	  "accounts": [{
//	    "name": "acme",
//	    "plan": "enterprise",
//	    "useCreatorMode": true,
//	    "maxExternalUsers": 10000,
//	    "limits": {"runningTurns": 200, "threadTurns": 500},
//	    "apiKeys": [{"key": "sk-acme-admin", "admin": true},
//	                {"keyHash": "<hex SHA-256 of a key>"}],
//	    "deployments": [{"id": 1, "name": "production"}],
//	    "agents": [{"id": "7", "deploymentId": 1}],
//	    "userAttributes": [{"name": "country", "type": "string"}],
//	    "groups": [{"name": "sales"}],
//	    "internalUsers": [{"username": "alice@acme.test"}],
//	    "branches": ["main", "dev-1"]
//	  }]
//	}
type Config struct {
	Accounts []Account `json:"accounts"`
}

// Account is an account with what belongs to it. [Operator.SaveAccount]
// and [Operator.Apply] create or update all of it.
type Account struct {
	// Name identifies the account; required, unique.
	Name string `json:"name"`
	// Plan is free, premium or enterprise; empty means free. Chat needs
	// premium or enterprise.
	Plan store.Plan `json:"plan"`
	// UseCreatorMode allows sessions in creator mode.
	UseCreatorMode bool `json:"useCreatorMode"`
	// MaxExternalUsers limits the account's persistent external users; 0
	// means [store.DefaultMaxExternalUsers] (10,000).
	MaxExternalUsers int `json:"maxExternalUsers"`
	// Limits are the account's own limits (JSON "limits": runningTurns,
	// runningTurnsPerUser, newEphemeralUsersPerMinute, embedTenants,
	// threadTurns, threadBytes); an omitted or zero one is the handler's
	// default, a negative one is no limit. Saved as given: an account
	// saved without limits gets the defaults again.
	Limits store.Limits `json:"limits"`
	// APIKeys are the account's keys, each given as Key or KeyHash.
	APIKeys []APIKey `json:"apiKeys"`
	// Deployments are created or renamed; none is removed.
	Deployments []Deployment `json:"deployments"`
	// Agents are created or moved to another deployment, which must be
	// listed in Deployments or exist already; none is removed.
	Agents []Agent `json:"agents"`
	// UserAttributes are account-wide attribute definitions, created or
	// updated; a stored type is never changed (that is an error).
	UserAttributes []Attribute `json:"userAttributes"`
	// Groups are account-wide groups, created or updated.
	Groups []Group `json:"groups"`
	// InternalUsers are created when missing.
	InternalUsers []InternalUser `json:"internalUsers"`
	// Branches are the development branches agents may query.
	Branches []string `json:"branches"`
}

// APIKey names an API key by its secret (Key) or by the hex SHA-256 of the
// secret (KeyHash), so that a configuration file need not hold secrets.
// Exactly one of the two is set.
type APIKey struct {
	Key     string `json:"key,omitempty"`
	KeyHash string `json:"keyHash,omitempty"`
	// Admin keys may call the admin endpoints.
	Admin bool `json:"admin"`
	// Name is an optional label shown by [Operator.APIKeys].
	Name string `json:"name,omitempty"`
}

// Deployment is something a session grants access to; its ID is chosen by
// the account.
type Deployment struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
}

// Agent is an AI agent of the account, serving one deployment.
type Agent struct {
	ID           string `json:"id"`
	DeploymentID int64  `json:"deploymentId"`
}

// Attribute is an account-wide user attribute definition.
type Attribute struct {
	Name         string              `json:"name"`
	Type         store.AttributeType `json:"type"`
	DisplayName  *string             `json:"displayName,omitempty"`
	DefaultValue *string             `json:"defaultValue,omitempty"`
	Description  *string             `json:"description,omitempty"`
}

// Group is an account-wide group.
type Group struct {
	Name        string  `json:"name"`
	Description *string `json:"description,omitempty"`
}

// InternalUser is a user of the account's own organization, keyed by
// username (usually an email address).
type InternalUser struct {
	Username string `json:"username"`
}

// DemoConfig returns the configuration of the example server's demo
// account "acme": an enterprise account with creator mode, the admin key
// "sk-acme-admin" and the key "sk-acme-user", deployment 1, agent "7", the
// attributes country (string) and region_ids (number_array), the groups
// sales and marketing, the internal user alice@acme.test and the branches
// main and dev-1. Its keys are public: use it for demos and tests only.
func DemoConfig() Config {
	return Config{Accounts: []Account{{
		Name:             "acme",
		Plan:             store.PlanEnterprise,
		UseCreatorMode:   true,
		MaxExternalUsers: 10000,
		APIKeys:          []APIKey{{Key: "sk-acme-admin", Admin: true}, {Key: "sk-acme-user"}},
		Deployments:      []Deployment{{ID: 1, Name: "production"}},
		Agents:           []Agent{{ID: "7", DeploymentID: 1}},
		UserAttributes: []Attribute{
			{Name: "country", Type: store.TypeString},
			{Name: "region_ids", Type: store.TypeNumberArray},
		},
		Groups:        []Group{{Name: "sales"}, {Name: "marketing"}},
		InternalUsers: []InternalUser{{Username: "alice@acme.test"}},
		Branches:      []string{"main", "dev-1"},
	}}}
}

// LoadConfig reads a Config from a JSON file and checks it with
// [Config.Validate].
func LoadConfig(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("operator: %w", err)
	}
	defer f.Close()
	return DecodeConfig(f)
}

// DecodeConfig reads a Config from JSON, strictly, and checks it with
// [Config.Validate]: an unknown field (keys name fields exactly: "Name" is
// not "name"), a value of the wrong JSON type,
// malformed JSON, anything after the document (other than white space), a
// document that is not an object, a null value and a key given twice in one object are
// errors that name the field or the line, so that a typo does not silently
// fall back to a default. No error quotes a value of the
// document (it may hold API keys).
func DecodeConfig(r io.Reader) (Config, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxConfig+1))
	if err != nil {
		return Config{}, fmt.Errorf("operator: read config: %w", err)
	}
	if len(data) > maxConfig {
		return Config{}, fmt.Errorf("operator: config: larger than %d bytes", maxConfig)
	}
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] != '{' {
		return Config{}, errors.New("operator: config: the document must be a JSON object")
	}
	var c Config
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, decodeError(data, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Config{}, fmt.Errorf("operator: config: content after the JSON document (line %d)", line(data, dec.InputOffset()))
	}
	if field, ok := wire.NULField(data); ok {
		// Every backend refuses it alike: PostgreSQL's text cannot hold it.
		return Config{}, fmt.Errorf("operator: config: field %s must not contain the NUL character (\\u0000)", field)
	}
	if field, ok := wire.NullField(data); ok {
		// encoding/json takes null as "leave it as it is": "apiKeys": null
		// would read as no keys, and revoke the listed ones at start-up.
		return Config{}, fmt.Errorf("operator: config: field %s is null: give a value or leave the field out", field)
	}
	switch miscased, dup := wire.KeyProblems(data, &c); {
	case miscased != "":
		// Keys name fields exactly; encoding/json would have read it into
		// the field of that name in another letter case.
		return Config{}, fmt.Errorf("operator: config: unknown field %q", miscased)
	case dup != "":
		// The last one would win silently: a second "apiKeys" drops the first's keys.
		return Config{}, fmt.Errorf("operator: config: field %s appears more than once", dup)
	}
	return c, c.Validate()
}

// maxConfig bounds the bootstrap document (bytes).
const maxConfig = 16 << 20

// decodeError names what the decoder refused, without the value.
func decodeError(data []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Errorf("operator: config: malformed JSON at line %d: %s", line(data, syn.Offset), strings.TrimPrefix(syn.Error(), "json: "))
	case errors.As(err, &typ):
		return fmt.Errorf("operator: config: field %s (line %d): want %s, got a JSON %s", wire.TypeErrorField(data, typ), line(data, typ.Offset), typ.Type, typ.Value)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("operator: config: the JSON document is empty or cut short")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		// encoding/json has no type for it; the message quotes only the
		// field's name.
		return fmt.Errorf("operator: config: unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	}
	return fmt.Errorf("operator: config: %w", err)
}

// line returns the 1-based line of byte offset off in data.
func line(data []byte, off int64) int {
	off = min(max(off, 0), int64(len(data)))
	return bytes.Count(data[:off], []byte{'\n'}) + 1
}

// maxName bounds names, usernames and ids (characters).
const maxName = 255

// Validate checks every account with [Account.Validate], and that no key
// is listed for two accounts or two accounts share a name.
func (c Config) Validate() error {
	keyOwner := make(map[string]string) // key hash → account name
	names := make(map[string]bool)
	for i, a := range c.Accounts {
		if err := a.Validate(); err != nil {
			return err
		}
		if names[a.Name] {
			return fmt.Errorf("operator: accounts[%d]: account %q is listed twice", i, a.Name)
		}
		names[a.Name] = true
		for j, k := range a.APIKeys {
			h, _ := k.hash()
			if owner, ok := keyOwner[string(h)]; ok && owner != a.Name {
				return fmt.Errorf("operator: account %q: apiKeys[%d] is also a key of account %q (a key belongs to one account)", a.Name, j, owner)
			}
			keyOwner[string(h)] = a.Name
		}
	}
	return nil
}

// Validate checks the account's name, plan, limit, keys, deployments,
// agents, definitions and internal users. Its errors name the field and
// never hold a key.
func (a Account) Validate() error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("operator: "+format, args...)
	}
	if err := checkSegment(a.Name); err != nil {
		return fail("account name: %v", err)
	}
	switch a.Plan {
	case "", store.PlanFree, store.PlanPremium, store.PlanEnterprise:
	default:
		return fail("account %q: unknown plan %q (free, premium or enterprise)", a.Name, a.Plan)
	}
	if a.MaxExternalUsers < 0 {
		return fail("account %q: maxExternalUsers must not be negative", a.Name)
	}
	seen := make(map[string]bool)
	for j, k := range a.APIKeys {
		h, err := k.hash()
		if err != nil {
			return fail("account %q: apiKeys[%d]: %v", a.Name, j, err)
		}
		if k.Name != "" {
			if err := checkName(k.Name); err != nil {
				return fail("account %q: apiKeys[%d].name: %v", a.Name, j, err)
			}
		}
		if seen[string(h)] {
			return fail("account %q: apiKeys[%d] is listed twice", a.Name, j)
		}
		seen[string(h)] = true
	}
	deps := make(map[int64]bool)
	for j, d := range a.Deployments {
		if d.ID <= 0 {
			return fail("account %q: deployments[%d].id must be a positive number", a.Name, j)
		}
		if deps[d.ID] {
			return fail("account %q: deployments[%d]: id %d is listed twice", a.Name, j, d.ID)
		}
		deps[d.ID] = true
	}
	if err := unique(a.Agents, func(ag Agent) string { return ag.ID }); err != nil {
		return fail("account %q: agents: %v", a.Name, err)
	}
	if err := unique(a.UserAttributes, func(at Attribute) string { return at.Name }); err != nil {
		return fail("account %q: userAttributes: %v", a.Name, err)
	}
	if err := unique(a.Groups, func(g Group) string { return g.Name }); err != nil {
		return fail("account %q: groups: %v", a.Name, err)
	}
	if err := unique(a.InternalUsers, func(u InternalUser) string { return u.Username }); err != nil {
		return fail("account %q: internalUsers: %v", a.Name, err)
	}
	for j, ag := range a.Agents {
		if err := checkSegment(ag.ID); err != nil {
			return fail("account %q: agents[%d].id: %v", a.Name, j, err)
		}
		if ag.DeploymentID <= 0 {
			return fail("account %q: agents[%d].deploymentId must be a positive number", a.Name, j)
		}
	}
	for j, at := range a.UserAttributes {
		if err := checkName(at.Name); err != nil {
			return fail("account %q: userAttributes[%d].name: %v", a.Name, j, err)
		}
		if !at.Type.Valid() {
			return fail("account %q: attribute %q: type must be string, number, string_array or number_array", a.Name, at.Name)
		}
	}
	for j, g := range a.Groups {
		if err := checkName(g.Name); err != nil {
			return fail("account %q: groups[%d].name: %v", a.Name, j, err)
		}
	}
	for j, u := range a.InternalUsers {
		if err := checkName(u.Username); err != nil {
			return fail("account %q: internalUsers[%d].username: %v", a.Name, j, err)
		}
	}
	return nil
}

// unique reports the first name that key gives to two items.
func unique[T any](items []T, key func(T) string) error {
	seen := make(map[string]bool, len(items))
	for j, it := range items {
		k := key(it)
		if seen[k] {
			return fmt.Errorf("[%d]: %q is listed twice", j, k)
		}
		seen[k] = true
	}
	return nil
}

func checkName(s string) error {
	switch {
	case s == "":
		return errors.New("is required")
	case !utf8.ValidString(s):
		return errors.New("is not valid UTF-8")
	case strings.ContainsRune(s, 0):
		return errors.New("must not contain the NUL character") // PostgreSQL's text cannot hold it
	case utf8.RuneCountInString(s) > maxName:
		return fmt.Errorf("is longer than %d characters", maxName)
	}
	return nil
}

// checkSegment checks a name that is a segment of the APIs' paths (an
// account's, an agent's): one a browser can address, so not "." or "..",
// which URLs remove however they are escaped (%2E too).
func checkSegment(s string) error {
	if s == "." || s == ".." {
		return fmt.Errorf("must not be %q: a browser cannot address it in a URL path", s)
	}
	return checkName(s)
}

// hash returns the SHA-256 under which k is stored.
func (k APIKey) hash() ([]byte, error) {
	switch {
	case k.Key != "" && k.KeyHash != "":
		return nil, errors.New("give key or keyHash, not both")
	case k.Key != "":
		return hashKey(k.Key), nil
	case k.KeyHash != "":
		return parseHash(k.KeyHash)
	}
	return nil, errors.New("key or keyHash is required")
}

// parseHash decodes a hex SHA-256.
func parseHash(s string) ([]byte, error) {
	h, err := hex.DecodeString(s)
	if err != nil || len(h) != 32 {
		return nil, errors.New("keyHash must be 64 hexadecimal digits (SHA-256 of the key)")
	}
	return h, nil
}
