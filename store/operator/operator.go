package operator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/embedkit/embedkit/internal/keyrevoke"
	"github.com/embedkit/embedkit/internal/nilarg"
	"github.com/embedkit/embedkit/internal/secret"
	"github.com/embedkit/embedkit/store"
)

// Operator sets up and manages the tenants of a store. Each method runs in
// one transaction: it changes everything it is asked to, or nothing. An
// Operator is safe for concurrent use.
type Operator struct {
	st store.Store
}

// New returns an Operator working on st. A nil st (or a nil pointer in
// it, as an ignored Open error leaves) panics here rather than in the
// first method called.
func New(st store.Store) *Operator {
	nilarg.Check("operator: New", "store", st)
	return &Operator{st: st}
}

// KeyInfo describes a stored API key without its secret.
type KeyInfo struct {
	// Hash is the hex SHA-256 of the key: what [Operator.RevokeAPIKey] and
	// a configuration's keyHash take.
	Hash   string
	Admin  bool
	Name   string
	Origin store.KeyOrigin
	// CreatedAt is when the key was first stored; zero for keys stored
	// before embedkit recorded it.
	CreatedAt time.Time
}

// HashKey returns the hex SHA-256 of an API key: its keyHash, which
// identifies the key without being the key.
func HashKey(key string) string { return hex.EncodeToString(hashKey(key)) }

func hashKey(key string) []byte {
	h := sha256.Sum256([]byte(key))
	return h[:]
}

// Apply creates or updates everything cfg describes, in one transaction,
// after checking it with [Config.Validate]. It is meant to run at every
// start of the host and is idempotent: running it again leaves the same
// state, and data created since (users, sessions, threads, embed tenants)
// is kept.
//
// The configuration is authoritative for the API keys of the accounts it
// lists: a key it listed before for such an account and no longer lists is
// deleted, and stops working at once in this process. Keys created through
// [Operator.CreateAPIKey] or [Operator.AddAPIKey], and the keys of accounts
// the configuration does not list, are never touched; a key the
// configuration lists becomes managed by it, even one first added through
// the Go API. Nothing else is ever removed.
//
// An attribute whose stored type differs from the configured one is an
// error wrapping [store.ErrConflict], and so is a key that belongs to
// another account.
func (o *Operator) Apply(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	var revoked [][]byte
	err := o.st.InTx(ctx, func(tx store.Tx) error {
		revoked = revoked[:0]
		// Keys first, so that a key moved from one listed account to
		// another is removed from the first before it is added to the
		// second.
		for _, a := range cfg.Accounts {
			acct, err := tx.AccountByName(ctx, a.Name)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("operator: account %q: %w", a.Name, err)
			}
			r, err := removeUnlisted(ctx, tx, acct, a.APIKeys)
			if err != nil {
				return fmt.Errorf("operator: account %q: %w", a.Name, err)
			}
			revoked = append(revoked, r...)
		}
		for _, a := range cfg.Accounts {
			if _, err := saveAccount(ctx, tx, a, store.OriginConfig); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, h := range revoked {
		keyrevoke.Forget(h)
	}
	// A listed key's admin flag may have changed: caches read it again.
	for _, a := range cfg.Accounts {
		for _, k := range a.APIKeys {
			if h, err := k.hash(); err == nil {
				keyrevoke.Forget(h)
			}
		}
	}
	return nil
}

// removeUnlisted deletes the account's keys of origin config that keep does
// not list, and returns their hashes.
func removeUnlisted(ctx context.Context, tx store.Tx, acct store.Account, keep []APIKey) ([][]byte, error) {
	stored, err := tx.APIKeys(ctx, acct.ID)
	if err != nil {
		return nil, err
	}
	listed := make(map[string]bool, len(keep))
	for _, k := range keep {
		h, _ := k.hash() // checked by Validate
		listed[string(h)] = true
	}
	var out [][]byte
	for _, k := range stored {
		if k.Origin != store.OriginConfig || listed[string(k.Hash)] {
			continue
		}
		// A replica starting at the same time may have deleted it since.
		if err := tx.DeleteAPIKey(ctx, acct.ID, k.Hash); err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		out = append(out, k.Hash)
	}
	return out, nil
}

// SaveAccount creates the account a.Name or updates its settings (plan,
// creator mode, limit, branches: all overwritten), then creates or updates
// everything a lists, in one transaction, after checking a with
// [Account.Validate]. Keys it lists are added as keys of the Go API
// (origin api), which the bootstrap configuration never removes; keys it
// does not list are kept. It returns the stored account.
func (o *Operator) SaveAccount(ctx context.Context, a Account) (store.Account, error) {
	if err := a.Validate(); err != nil {
		return store.Account{}, err
	}
	var out store.Account
	err := o.st.InTx(ctx, func(tx store.Tx) error {
		var err error
		out, err = saveAccount(ctx, tx, a, store.OriginAPI)
		return err
	})
	return out, err
}

// saveAccount writes a; its keys get origin.
func saveAccount(ctx context.Context, tx store.Tx, a Account, origin store.KeyOrigin) (store.Account, error) {
	fail := func(what string, err error) (store.Account, error) {
		return store.Account{}, fmt.Errorf("operator: account %q: %s: %w", a.Name, what, err)
	}
	plan := a.Plan
	if plan == "" {
		plan = store.PlanFree
	}
	acct, err := tx.SaveAccount(ctx, store.Account{
		Name:             a.Name,
		Plan:             plan,
		UseCreatorMode:   a.UseCreatorMode,
		MaxExternalUsers: a.MaxExternalUsers,
		Limits:           a.Limits,
		Branches:         slices.Clone(a.Branches),
	})
	if err != nil {
		return fail("save", err)
	}
	now := time.Now().UTC()
	for j, k := range a.APIKeys {
		if err := saveKey(ctx, tx, acct.ID, k, origin, now); err != nil {
			return fail(fmt.Sprintf("apiKeys[%d]", j), err)
		}
	}
	for _, d := range a.Deployments {
		if err := tx.SaveDeployment(ctx, store.Deployment{AccountID: acct.ID, ID: d.ID, Name: d.Name}); err != nil {
			return fail(fmt.Sprintf("deployment %d", d.ID), err)
		}
	}
	for _, ag := range a.Agents {
		if err := saveAgent(ctx, tx, acct.ID, ag); err != nil {
			return fail(fmt.Sprintf("agent %q", ag.ID), err)
		}
	}
	if err := saveDefinitions(ctx, tx, acct.ID, a.Groups, a.UserAttributes); err != nil {
		return fail("definitions", err)
	}
	for _, u := range a.InternalUsers {
		if _, err := saveInternalUser(ctx, tx, acct.ID, u.Username, now); err != nil {
			return fail(fmt.Sprintf("internal user %q", u.Username), err)
		}
	}
	return acct, nil
}

// saveAgent saves an agent whose deployment exists.
func saveAgent(ctx context.Context, tx store.Tx, accountID int64, a Agent) error {
	found, err := tx.Lookup(ctx, store.Lookup{Scope: store.TenantWide(accountID), DeploymentID: a.DeploymentID})
	if err != nil {
		return fmt.Errorf("deployment %d: %w", a.DeploymentID, err)
	}
	if !found.DeploymentFound {
		return fmt.Errorf("deployment %d: %w", a.DeploymentID, store.ErrNotFound)
	}
	return tx.SaveAgent(ctx, store.Agent{AccountID: accountID, ID: a.ID, DeploymentID: a.DeploymentID})
}

func saveKey(ctx context.Context, tx store.Tx, accountID int64, k APIKey, origin store.KeyOrigin, now time.Time) error {
	h, err := k.hash()
	if err != nil {
		return err
	}
	if origin == store.OriginAPI {
		// A key the configuration listed stays the configuration's: the Go
		// API may change its flag and name, and dropping it from the
		// configuration still revokes it (the JSON is authoritative for
		// the keys it once listed).
		old, _, err := tx.APIKeyByHash(ctx, h)
		if err == nil && old.AccountID == accountID && old.Origin == store.OriginConfig {
			origin = store.OriginConfig
		} else if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	err = tx.SaveAPIKey(ctx, store.APIKey{Hash: h, AccountID: accountID, Admin: k.Admin, Origin: origin, Name: k.Name, CreatedAt: now})
	if errors.Is(err, store.ErrConflict) {
		// Never name the key: the error may be logged.
		return fmt.Errorf("the key belongs to another account (a key belongs to one account): %w", err)
	}
	return err
}

// saveInternalUser creates the internal user named username when missing;
// an existing one is left as it is.
func saveInternalUser(ctx context.Context, tx store.Tx, accountID int64, username string, now time.Time) (store.User, error) {
	return tx.UpsertUser(ctx, store.UserUpsert{UserKey: store.UserKey{AccountID: accountID, InternalID: username}, Persistent: true, Now: now})
}

// saveDefinitions writes account-wide groups and attribute definitions.
// The store never changes a stored attribute's type, so the types are
// compared first: a different one is a conflict, and nothing is written.
func saveDefinitions(ctx context.Context, tx store.Tx, accountID int64, groups []Group, attrs []Attribute) error {
	if len(groups) == 0 && len(attrs) == 0 {
		return nil
	}
	scope := store.TenantWide(accountID)
	gdefs := make([]store.GroupDef, len(groups))
	for i, g := range groups {
		gdefs[i] = store.GroupDef{Name: g.Name, Description: g.Description}
	}
	adefs := make([]store.AttributeDef, len(attrs))
	names := make([]string, len(attrs))
	for i, a := range attrs {
		adefs[i] = store.AttributeDef{Name: a.Name, Type: a.Type, DisplayName: a.DisplayName, DefaultValue: a.DefaultValue, Description: a.Description}
		names[i] = a.Name
	}
	if len(names) > 0 {
		found, err := tx.Lookup(ctx, store.Lookup{Scope: scope, AttrNames: names})
		if err != nil {
			return err
		}
		for _, s := range found.Attributes {
			for _, d := range adefs {
				if d.Name == s.Name && d.Type != s.Type {
					return fmt.Errorf("attribute %q is stored with type %s, not %s: %w", s.Name, s.Type, d.Type, store.ErrConflict)
				}
			}
		}
	}
	return tx.UpsertDefinitions(ctx, scope, gdefs, adefs)
}

// inAccount runs fn in one transaction with the account named name;
// a missing account is an error wrapping [store.ErrNotFound].
func (o *Operator) inAccount(ctx context.Context, name string, fn func(tx store.Tx, acct store.Account) error) error {
	return o.st.InTx(ctx, func(tx store.Tx) error {
		acct, err := tx.AccountByName(ctx, name)
		if err != nil {
			return fmt.Errorf("operator: account %q: %w", name, err)
		}
		return fn(tx, acct)
	})
}

// Account returns the stored account named name; a missing one is an error
// wrapping [store.ErrNotFound].
func (o *Operator) Account(ctx context.Context, name string) (store.Account, error) {
	acct, err := o.st.AccountByName(ctx, name)
	if err != nil {
		return store.Account{}, fmt.Errorf("operator: account %q: %w", name, err)
	}
	return acct, nil
}

// CreateAPIKey creates a new random API key (256 bits from crypto/rand,
// prefixed "sk-") for the account and returns it with its description. This
// is the only time the key is available: the store keeps only its hash.
// spec gives Admin and Name; its Key and KeyHash must be empty. The key is
// managed by the Go API: the bootstrap configuration never removes it.
func (o *Operator) CreateAPIKey(ctx context.Context, account string, spec APIKey) (key string, info KeyInfo, err error) {
	if spec.Key != "" || spec.KeyHash != "" {
		return "", KeyInfo{}, errors.New("operator: CreateAPIKey makes the key itself: leave Key and KeyHash empty (AddAPIKey stores a key you made)")
	}
	key = "sk-" + secret.New().Reveal()
	spec.Key = key
	info, err = o.AddAPIKey(ctx, account, spec)
	if err != nil {
		return "", KeyInfo{}, err
	}
	return key, info, nil
}

// AddAPIKey stores a key the host made, given as Key or KeyHash, for the
// account, or updates its admin flag and name when the account has it
// already. A new key is managed by the Go API (origin api): the bootstrap
// configuration never removes it. A key the configuration lists stays the
// configuration's: dropping it from the configuration still revokes it. A
// key of another account is an error wrapping [store.ErrConflict].
func (o *Operator) AddAPIKey(ctx context.Context, account string, spec APIKey) (KeyInfo, error) {
	h, err := spec.hash()
	if err != nil {
		return KeyInfo{}, fmt.Errorf("operator: %w", err)
	}
	if err := checkLabel(spec.Name); err != nil {
		return KeyInfo{}, err
	}
	var info KeyInfo
	err = o.inAccount(ctx, account, func(tx store.Tx, acct store.Account) error {
		if err := saveKey(ctx, tx, acct.ID, spec, store.OriginAPI, time.Now().UTC()); err != nil {
			return fmt.Errorf("operator: account %q: %w", account, err)
		}
		k, _, err := tx.APIKeyByHash(ctx, h)
		if err != nil {
			return err
		}
		info = keyInfo(k)
		return nil
	})
	if err == nil {
		keyrevoke.Forget(h) // its admin flag may have changed: caches read it again
	}
	return info, err
}

func checkLabel(name string) error {
	if name != "" {
		if err := checkName(name); err != nil {
			return fmt.Errorf("operator: key name: %w", err)
		}
	}
	return nil
}

// APIKeys lists the account's keys, oldest first, without their secrets.
func (o *Operator) APIKeys(ctx context.Context, account string) ([]KeyInfo, error) {
	var out []KeyInfo
	err := o.inAccount(ctx, account, func(tx store.Tx, acct store.Account) error {
		keys, err := tx.APIKeys(ctx, acct.ID)
		if err != nil {
			return err
		}
		out = make([]KeyInfo, len(keys))
		for i, k := range keys {
			out[i] = keyInfo(k)
		}
		return nil
	})
	return out, err
}

func keyInfo(k store.APIKey) KeyInfo {
	return KeyInfo{Hash: hex.EncodeToString(k.Hash), Admin: k.Admin, Name: k.Name, Origin: k.Origin, CreatedAt: k.CreatedAt}
}

// RevokeAPIKey deletes the account's key whose hex SHA-256 is keyHash (see
// [HashKey] and [KeyInfo].Hash). The key stops working at once in this
// process, and in other processes sharing the store once their key caches
// expire (at most 5 seconds: middleware.MaxKeyCacheTTL). A key unknown to
// the account is an error wrapping [store.ErrNotFound]. A key that the
// bootstrap configuration still lists comes back at its next
// [Operator.Apply]: remove it from the configuration too.
func (o *Operator) RevokeAPIKey(ctx context.Context, account, keyHash string) error {
	h, err := parseHash(keyHash)
	if err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	err = o.inAccount(ctx, account, func(tx store.Tx, acct store.Account) error {
		if err := tx.DeleteAPIKey(ctx, acct.ID, h); err != nil {
			return fmt.Errorf("operator: account %q: revoke key: %w", account, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	keyrevoke.Forget(h)
	return nil
}

// SaveDeployment creates or renames a deployment of the account.
func (o *Operator) SaveDeployment(ctx context.Context, account string, d Deployment) error {
	if d.ID <= 0 {
		return errors.New("operator: deployment id must be a positive number")
	}
	return o.inAccount(ctx, account, func(tx store.Tx, acct store.Account) error {
		return tx.SaveDeployment(ctx, store.Deployment{AccountID: acct.ID, ID: d.ID, Name: d.Name})
	})
}

// SaveAgent creates an agent of the account or moves it to another
// deployment. The deployment must exist: else an error wrapping
// [store.ErrNotFound].
func (o *Operator) SaveAgent(ctx context.Context, account string, a Agent) error {
	if err := checkSegment(a.ID); err != nil {
		return fmt.Errorf("operator: agent id: %w", err)
	}
	return o.inAccount(ctx, account, func(tx store.Tx, acct store.Account) error {
		if err := saveAgent(ctx, tx, acct.ID, a); err != nil {
			return fmt.Errorf("operator: account %q: agent %q: %w", account, a.ID, err)
		}
		return nil
	})
}

// SaveInternalUser creates an internal user of the account when missing
// and returns it.
func (o *Operator) SaveInternalUser(ctx context.Context, account string, u InternalUser) (store.User, error) {
	if err := checkName(u.Username); err != nil {
		return store.User{}, fmt.Errorf("operator: username: %w", err)
	}
	var out store.User
	err := o.inAccount(ctx, account, func(tx store.Tx, acct store.Account) error {
		var err error
		out, err = saveInternalUser(ctx, tx, acct.ID, u.Username, time.Now().UTC())
		return err
	})
	return out, err
}

// SaveGroups creates the account-wide groups that are missing and updates
// the description of the others. Groups not listed are kept.
func (o *Operator) SaveGroups(ctx context.Context, account string, groups []Group) error {
	for j, g := range groups {
		if err := checkName(g.Name); err != nil {
			return fmt.Errorf("operator: groups[%d].name: %w", j, err)
		}
	}
	if err := unique(groups, func(g Group) string { return g.Name }); err != nil {
		return fmt.Errorf("operator: groups: %w", err)
	}
	return o.inAccount(ctx, account, func(tx store.Tx, acct store.Account) error {
		return saveDefinitions(ctx, tx, acct.ID, groups, nil)
	})
}

// SaveAttributes creates the account-wide attribute definitions that are
// missing and updates the optional fields of the others. A stored type is
// never changed: a different one is an error wrapping [store.ErrConflict],
// and nothing changes. Definitions not listed are kept.
func (o *Operator) SaveAttributes(ctx context.Context, account string, attrs []Attribute) error {
	for j, a := range attrs {
		if err := checkName(a.Name); err != nil {
			return fmt.Errorf("operator: userAttributes[%d].name: %w", j, err)
		}
		if !a.Type.Valid() {
			return fmt.Errorf("operator: attribute %q: type must be string, number, string_array or number_array", a.Name)
		}
	}
	if err := unique(attrs, func(a Attribute) string { return a.Name }); err != nil {
		return fmt.Errorf("operator: userAttributes: %w", err)
	}
	return o.inAccount(ctx, account, func(tx store.Tx, acct store.Account) error {
		return saveDefinitions(ctx, tx, acct.ID, nil, attrs)
	})
}
