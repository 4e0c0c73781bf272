package embedsession

import (
	"encoding/json"
	"time"

	"github.com/embedkit/embedkit/internal/provision"
	"github.com/embedkit/embedkit/internal/wire"
	"github.com/embedkit/embedkit/store"
)

// SessionRequest is the body of POST /api/v1/embed/generate-session. The
// handler decodes it and [Client.GenerateSession] sends it. Pointer fields,
// and nil slices, tell an omitted field from an empty one.
type SessionRequest struct {
	// DeploymentID is required and must name a deployment of the account.
	DeploymentID int64 `json:"deploymentId"`
	// ExternalID (lowercase, trimmed) or InternalID: exactly one.
	ExternalID string `json:"externalId,omitempty"`
	InternalID string `json:"internalId,omitempty"`
	// Email is attached to an external user; nil preserves the stored one.
	Email       *string      `json:"email,omitempty"`
	UserProfile *UserProfile `json:"userProfile,omitempty"`
	// EmbedTenantName names the embed tenant; empty means the account's
	// default one.
	EmbedTenantName string `json:"embedTenantName,omitempty"`
	CreatorMode     bool   `json:"creatorMode,omitempty"`
	// UserAttributes overwrite the values of the named attributes; nil
	// leaves every value as it is.
	UserAttributes []UserAttribute `json:"userAttributes,omitempty"`
	// Groups: nil keeps memberships, a pointer to an empty slice clears
	// them, names replace them. See [Groups].
	Groups                   *[]string             `json:"groups,omitempty"`
	UserAttributeDefinitions []AttributeDefinition `json:"userAttributeDefinitions,omitempty"`
	GroupDefinitions         []GroupDefinition     `json:"groupDefinitions,omitempty"`
	// SecurityContext is a JSON object passed to data queries; nil
	// preserves the stored one, JSON null clears it.
	SecurityContext json.RawMessage `json:"securityContext,omitempty"`
}

// UserProfile is the display profile of an external user. A nil property
// preserves the stored value.
type UserProfile struct {
	DisplayName *string `json:"displayName,omitempty"`
	// Picture is an absolute http:// or https:// URL; an empty string
	// clears it.
	Picture *string `json:"picture,omitempty"`
}

// UserAttribute is one attribute value of a [SessionRequest]. Value is the
// JSON of a string, number, array of strings, array of numbers, or null
// (clears the value); build it with [Value] (Value(nil) clears). A nil
// Value is sent as no value, which the server refuses with a 400: a value
// left out by mistake never clears one.
type UserAttribute struct {
	Name  string          `json:"name"`
	Value json.RawMessage `json:"value,omitzero"`
}

// AttributeDefinition asks for an attribute to exist in the embed tenant
// (creator mode). Nil optional fields leave stored values unchanged.
type AttributeDefinition struct {
	Name         string              `json:"name"`
	Type         store.AttributeType `json:"type"`
	DisplayName  *string             `json:"displayName,omitempty"`
	DefaultValue *string             `json:"defaultValue,omitempty"`
	Description  *string             `json:"description,omitempty"`
}

// GroupDefinition asks for a group to exist in the embed tenant (creator
// mode). A nil Description leaves the stored one unchanged.
type GroupDefinition struct {
	Name        string  `json:"name"`
	Description *string `json:"description,omitempty"`
}

// SessionResponse is the body of a successful generate-session.
type SessionResponse struct {
	SessionID string `json:"sessionId"`
}

// TokenRequest is the body of POST /api/v1/embed/session/token.
type TokenRequest struct {
	SessionID string `json:"sessionId"`
}

// TokenResponse is the answer of POST /api/v1/embed/session/token: a token
// to send as Authorization: Bearer <token>, and its expiry.
type TokenResponse struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// Groups returns a Groups field value naming exactly names; Groups() with no
// names clears every membership.
func Groups(names ...string) *[]string {
	if names == nil {
		names = []string{}
	}
	return &names
}

// Value encodes v (a string, a number, a []string, a []float64 or []int, or
// nil) as an attribute value. It panics if v cannot be encoded as JSON,
// which only a programming error causes.
func Value(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic("embedsession.Value: " + err.Error())
	}
	return b
}

// String returns a pointer to s, for the optional fields of a request.
func String(s string) *string { return &s }

// Validate checks the rules of the request that need no database, as the
// handler does (valid UTF-8, lengths in characters and entry counts, id and
// name rules), and returns an error naming the offending field: an
// *[github.com/embedkit/embedkit/middleware/httperr.Error] with status 400,
// whose Message is the text the server would answer. A request that passes
// may still fail on the server (unknown names, limits, flags).
func (r *SessionRequest) Validate() error {
	if r.DeploymentID <= 0 {
		return wire.BadRequest("deploymentId is required and must be a positive number")
	}
	p := r.provision()
	return p.Validate()
}

// checkText refuses a request with a string that is not valid UTF-8,
// which encoding/json would silently replace with U+FFFD (merging, say,
// two externalIds that differ only in invalid bytes).
func (r *SessionRequest) checkText() error {
	p := r.provision()
	return p.CheckText()
}

// provision converts the request to the shared provisioning request.
func (r *SessionRequest) provision() provision.Request {
	p := provision.Request{
		DeploymentID:    r.DeploymentID,
		ExternalID:      r.ExternalID,
		InternalID:      r.InternalID,
		Email:           r.Email,
		SecurityContext: r.SecurityContext,
		CreatorMode:     r.CreatorMode,
		EmbedTenantName: r.EmbedTenantName,
		Persistent:      true,
	}
	if r.UserProfile != nil {
		p.DisplayName, p.Picture = r.UserProfile.DisplayName, r.UserProfile.Picture
		p.ProfileSent = true
	}
	if r.UserAttributes != nil {
		p.Attributes = make([]provision.AttributeInput, len(r.UserAttributes))
		for i, a := range r.UserAttributes {
			p.Attributes[i] = provision.AttributeInput{Name: a.Name, Value: a.Value}
		}
	}
	if r.Groups != nil {
		p.Groups, p.GroupsSent = *r.Groups, true
	}
	if r.GroupDefinitions != nil {
		p.GroupDefinitions = make([]store.GroupDef, len(r.GroupDefinitions))
		for i, d := range r.GroupDefinitions {
			p.GroupDefinitions[i] = store.GroupDef{Name: d.Name, Description: d.Description}
		}
	}
	if r.UserAttributeDefinitions != nil {
		p.AttributeDefinitions = make([]store.AttributeDef, len(r.UserAttributeDefinitions))
		for i, d := range r.UserAttributeDefinitions {
			p.AttributeDefinitions[i] = store.AttributeDef{Name: d.Name, Type: d.Type,
				DisplayName: d.DisplayName, DefaultValue: d.DefaultValue, Description: d.Description}
		}
	}
	return p
}
