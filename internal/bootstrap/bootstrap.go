// Package bootstrap creates accounts, API keys, deployments, agents, the
// tenant-wide catalog and internal users from the bootstrap JSON of
// decisions.md §6. [Apply] is idempotent: the example server runs it at every
// start, and internal/apitest runs it to seed test servers.
package bootstrap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/embedkit/embedkit/internal/secret"
	"github.com/embedkit/embedkit/store"
)

// Config is the bootstrap JSON document.
type Config struct {
	Accounts []Account `json:"accounts"`
}

// Account is one account of the bootstrap document.
type Account struct {
	Name             string      `json:"name"`
	Plan             store.Plan  `json:"plan"`
	UseCreatorMode   bool        `json:"useCreatorMode"`
	MaxExternalUsers int         `json:"maxExternalUsers"`
	APIKeys          []APIKey    `json:"apiKeys"`
	Deployments      []Deploy    `json:"deployments"`
	Agents           []Agent     `json:"agents"`
	UserAttributes   []Attribute `json:"userAttributes"`
	Groups           []Group     `json:"groups"`
	InternalUsers    []Internal  `json:"internalUsers"`
	Branches         []string    `json:"branches"`

	// Limits are the account's own limits (runningTurns,
	// runningTurnsPerUser, newEphemeralUsersPerMinute, embedTenants,
	// threadTurns, threadBytes); an omitted or zero one is the handler's
	// default, a negative one is no limit.
	Limits store.Limits `json:"limits"`
}

// APIKey is a raw API key; only its hash is stored.
type APIKey struct {
	Key   string `json:"key"`
	Admin bool   `json:"admin"`
}

// Deploy is a deployment.
type Deploy struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
}

// Agent is an AI agent.
type Agent struct {
	ID           string `json:"id"`
	DeploymentID int64  `json:"deploymentId"`
}

// Attribute is a tenant-wide attribute definition.
type Attribute struct {
	Name         string              `json:"name"`
	Type         store.AttributeType `json:"type"`
	DisplayName  *string             `json:"displayName,omitempty"`
	DefaultValue *string             `json:"defaultValue,omitempty"`
	Description  *string             `json:"description,omitempty"`
}

// Group is a tenant-wide group.
type Group struct {
	Name        string  `json:"name"`
	Description *string `json:"description,omitempty"`
}

// Internal is an internal user.
type Internal struct {
	Username string `json:"username"`
}

// Demo returns the demo configuration of decisions.md §6.
func Demo() Config {
	return Config{Accounts: []Account{{
		Name:             "acme",
		Plan:             store.PlanEnterprise,
		UseCreatorMode:   true,
		MaxExternalUsers: 10000,
		APIKeys:          []APIKey{{Key: "sk-acme-admin", Admin: true}, {Key: "sk-acme-user"}},
		Deployments:      []Deploy{{ID: 1, Name: "production"}},
		Agents:           []Agent{{ID: "7", DeploymentID: 1}},
		UserAttributes: []Attribute{
			{Name: "country", Type: store.TypeString},
			{Name: "region_ids", Type: store.TypeNumberArray},
		},
		Groups:        []Group{{Name: "sales"}, {Name: "marketing"}},
		InternalUsers: []Internal{{Username: "alice@acme.test"}},
		Branches:      []string{"main", "dev-1"},
	}}}
}

// Load reads a Config from a JSON file.
func Load(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, err
	}
	defer f.Close()
	return Decode(f)
}

// Decode reads a Config from JSON and checks it with [Config.Validate].
func Decode(r io.Reader) (Config, error) {
	var c Config
	if err := json.NewDecoder(r).Decode(&c); err != nil {
		return Config{}, fmt.Errorf("bootstrap: decode config: %w", err)
	}
	return c, c.Validate()
}

// Validate checks names, plans, attribute types, and that no key is listed
// for two accounts.
func (c Config) Validate() error {
	keyOwner := make(map[string]string) // key -> account name
	for i, a := range c.Accounts {
		if a.Name == "" {
			return fmt.Errorf("bootstrap: accounts[%d].name is required", i)
		}
		switch a.Plan {
		case "", store.PlanFree, store.PlanPremium, store.PlanEnterprise:
		default:
			return fmt.Errorf("bootstrap: account %q: unknown plan %q", a.Name, a.Plan)
		}
		if a.MaxExternalUsers < 0 {
			return fmt.Errorf("bootstrap: account %q: maxExternalUsers must not be negative", a.Name)
		}
		for j, k := range a.APIKeys {
			if k.Key == "" {
				return fmt.Errorf("bootstrap: account %q: apiKeys[%d].key is required", a.Name, j)
			}
			if owner, ok := keyOwner[k.Key]; ok && owner != a.Name {
				return fmt.Errorf("bootstrap: account %q: apiKeys[%d] is also a key of account %q (a key belongs to one account)", a.Name, j, owner)
			}
			keyOwner[k.Key] = a.Name
		}
		for _, at := range a.UserAttributes {
			if at.Name == "" || !at.Type.Valid() {
				return fmt.Errorf("bootstrap: account %q: attribute %q needs a name and a valid type", a.Name, at.Name)
			}
		}
		for _, g := range a.Groups {
			if g.Name == "" {
				return fmt.Errorf("bootstrap: account %q: a group needs a name", a.Name)
			}
		}
		for _, u := range a.InternalUsers {
			if u.Username == "" {
				return fmt.Errorf("bootstrap: account %q: an internal user needs a username", a.Name)
			}
		}
	}
	return nil
}

// Apply creates or updates everything cfg describes, in one transaction.
// It is idempotent: running it again leaves the same state, and data created
// since (users, sessions, embed tenants) is kept. An attribute whose stored
// type differs from the configured one is an error wrapping
// [store.ErrConflict].
func Apply(ctx context.Context, st store.Store, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	return st.InTx(ctx, func(tx store.Tx) error {
		for _, ca := range cfg.Accounts {
			plan := ca.Plan
			if plan == "" {
				plan = store.PlanFree
			}
			acct, err := tx.SaveAccount(ctx, store.Account{
				Name:             ca.Name,
				Plan:             plan,
				UseCreatorMode:   ca.UseCreatorMode,
				MaxExternalUsers: ca.MaxExternalUsers,
				Limits:           ca.Limits,
				Branches:         ca.Branches,
			})
			if err != nil {
				return fmt.Errorf("bootstrap: account %q: %w", ca.Name, err)
			}
			for j, k := range ca.APIKeys {
				if err := tx.SaveAPIKey(ctx, store.APIKey{Hash: secret.Hash(k.Key), AccountID: acct.ID, Admin: k.Admin}); err != nil {
					if errors.Is(err, store.ErrConflict) {
						return fmt.Errorf("bootstrap: account %q: apiKeys[%d]: the key belongs to another account (a key belongs to one account)", ca.Name, j)
					}
					return fmt.Errorf("bootstrap: account %q: api key: %w", ca.Name, err)
				}
			}
			for _, d := range ca.Deployments {
				if err := tx.SaveDeployment(ctx, store.Deployment{AccountID: acct.ID, ID: d.ID, Name: d.Name}); err != nil {
					return fmt.Errorf("bootstrap: account %q: deployment %d: %w", ca.Name, d.ID, err)
				}
			}
			for _, a := range ca.Agents {
				if err := tx.SaveAgent(ctx, store.Agent{AccountID: acct.ID, ID: a.ID, DeploymentID: a.DeploymentID}); err != nil {
					return fmt.Errorf("bootstrap: account %q: agent %q: %w", ca.Name, a.ID, err)
				}
			}
			scope := store.TenantWide(acct.ID)
			if len(ca.Groups) > 0 {
				defs := make([]store.GroupDef, len(ca.Groups))
				for i, g := range ca.Groups {
					defs[i] = store.GroupDef{Name: g.Name, Description: g.Description}
				}
				if err := tx.UpsertGroups(ctx, scope, defs); err != nil {
					return fmt.Errorf("bootstrap: account %q: groups: %w", ca.Name, err)
				}
			}
			if len(ca.UserAttributes) > 0 {
				defs := make([]store.AttributeDef, len(ca.UserAttributes))
				names := make([]string, len(ca.UserAttributes))
				for i, a := range ca.UserAttributes {
					defs[i] = store.AttributeDef{Name: a.Name, Type: a.Type, DisplayName: a.DisplayName, DefaultValue: a.DefaultValue, Description: a.Description}
					names[i] = a.Name
				}
				if err := tx.UpsertAttributes(ctx, scope, defs); err != nil {
					return fmt.Errorf("bootstrap: account %q: attributes: %w", ca.Name, err)
				}
				stored, err := tx.AttributesByName(ctx, scope, names)
				if err != nil {
					return fmt.Errorf("bootstrap: account %q: attributes: %w", ca.Name, err)
				}
				for _, s := range stored {
					for _, d := range defs {
						if d.Name == s.Name && d.Type != s.Type {
							return fmt.Errorf("bootstrap: account %q: attribute %q is stored with type %s, not %s: %w", ca.Name, s.Name, s.Type, d.Type, store.ErrConflict)
						}
					}
				}
			}
			for _, u := range ca.InternalUsers {
				if _, err := tx.SaveInternalUser(ctx, acct.ID, u.Username); err != nil {
					return fmt.Errorf("bootstrap: account %q: internal user: %w", ca.Name, err)
				}
			}
		}
		return nil
	})
}
