package chatstream

import (
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/embedkit/embedkit/internal/provision"
	"github.com/embedkit/embedkit/internal/wire"
)

// MaxEphemeralTTL is the largest accepted sessionSettings.ephemeralTtlSeconds:
// 90 days. Ephemeral users are meant to be short-lived; a host that needs a
// user for longer makes it persistent (isEphemeral false).
const MaxEphemeralTTL = 90 * 24 * time.Hour

// MaxInputBytes caps the input of a chat request: 32 KiB of UTF-8 (the
// whole body is capped at 1 MiB too). A longer input is a 400.
const MaxInputBytes = 32 << 10

// maxBranchName caps activeBranchName, in characters.
const maxBranchName = 255

// Request is the body of a stream-chat-state request. The handler decodes it
// and the [Client] sends it.
type Request struct {
	// Input is the user's message. Empty means none: the stream then
	// carries the thread's state (or rejoins its running turn).
	Input string `json:"input,omitempty"`
	// ChatID names the thread. Empty starts a new thread whose id the
	// stream's __cutoff__ message carries in state.chatId. An id is 1 to
	// 128 characters of A-Z a-z 0-9 . _ : -
	ChatID string `json:"chatId,omitempty"`
	// SessionSettings names the user. Required with an API key; optional
	// with a session token, where it must name the token's user.
	SessionSettings *SessionSettings `json:"sessionSettings,omitempty"`
	// ActiveBranchName is the development branch to query instead of the
	// main branch.
	ActiveBranchName string `json:"activeBranchName,omitempty"`
	// IsDefaultBranch says whether ActiveBranchName is the default branch.
	// Nil means the spec's default: true when no branch is named, false
	// when one is.
	IsDefaultBranch *bool `json:"isDefaultBranch,omitempty"`
	// ResumeAfterSort, when rejoining a running turn, skips the lines whose
	// sort is not above it (the client already has them).
	ResumeAfterSort *int64 `json:"resumeAfterSort,omitempty"`
}

// SessionSettings is the identity part of a chat or abort request.
type SessionSettings struct {
	// ExternalID is the external user's id: lowercase and trimmed.
	// Exactly one of ExternalID and InternalID is set.
	ExternalID string `json:"externalId,omitempty"`
	// InternalID is the username of an existing internal user of the
	// account (operator.InternalUser.Username, often an email address);
	// no such user is a 400.
	InternalID string `json:"internalId,omitempty"`
	// Email is the user's email address.
	Email *string `json:"email,omitempty"`
	// UserAttributes are attribute values for row-level security; only
	// with ExternalID. Omitted keeps the stored values.
	UserAttributes []UserAttribute `json:"userAttributes,omitzero"`
	// Groups are the user's group names; only with ExternalID. Nil keeps
	// the stored memberships, an empty non-nil slice clears them.
	Groups []string `json:"groups,omitzero"`
	// SecurityContext is a JSON object passed to data queries; only with
	// ExternalID.
	SecurityContext json.RawMessage `json:"securityContext,omitempty"`
	// IsEphemeral false makes the user persistent. Nil or true: a new user
	// is ephemeral.
	IsEphemeral *bool `json:"isEphemeral,omitempty"`
	// EphemeralTTLSeconds is the lifetime of a new ephemeral user in whole
	// seconds: positive, at most [MaxEphemeralTTL]. Nil: the handler's
	// default (one week unless configured).
	EphemeralTTLSeconds *int64 `json:"ephemeralTtlSeconds,omitempty"`
}

// UserAttribute is one userAttributes entry. Value is a string, a number, an
// array of strings or numbers, or nil (which clears the value). After
// decoding, Value holds the entry's raw JSON as a [json.RawMessage].
type UserAttribute struct {
	Name  string `json:"name"`
	Value any    `json:"value"`
}

// UnmarshalJSON keeps the value's raw JSON so that its type is checked
// against the attribute's definition.
func (a *UserAttribute) UnmarshalJSON(b []byte) error {
	var raw struct {
		Name  *string         `json:"name"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if raw.Name != nil {
		a.Name = *raw.Name
	}
	// An omitted value stays a nil RawMessage, which validation refuses
	// (null, which clears, must be sent as such).
	a.Value = raw.Value
	return nil
}

// AbortRequest is the body of an abort request.
type AbortRequest struct {
	// ChatID names the thread whose running turn is aborted. Required.
	ChatID string `json:"chatId"`
	// SessionSettings names the user (externalId or internalId). Required
	// with an API key; optional with a session token.
	SessionSettings *SessionSettings `json:"sessionSettings,omitempty"`
}

// ValidChatID reports whether id is a valid chat id: 1 to 128 characters of
// A-Z a-z 0-9 . _ : -
func ValidChatID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// chatRequest is a decoded, validated chat request.
type chatRequest struct {
	Request
	branchDefault bool
}

// decodeChatRequest decodes and validates a chat request body. needSettings
// is true with an API key. Every error is a 4xx *httperr.Error.
func decodeChatRequest(body []byte, needSettings bool) (chatRequest, error) {
	var req Request
	if err := wire.Unmarshal(body, &req); err != nil {
		return chatRequest{}, err
	}
	if req.ChatID != "" || wire.HasKey(body, "chatId") {
		if !ValidChatID(req.ChatID) {
			return chatRequest{}, wire.BadRequest("chatId must be 1 to 128 characters of A-Z a-z 0-9 . _ : -")
		}
	}
	if len(req.Input) > MaxInputBytes {
		return chatRequest{}, wire.BadRequest("input must be at most %d bytes (32 KiB)", MaxInputBytes)
	}
	if err := checkBranchName(req.ActiveBranchName); err != nil {
		return chatRequest{}, err
	}
	if req.ResumeAfterSort != nil && *req.ResumeAfterSort < 0 {
		return chatRequest{}, wire.BadRequest("resumeAfterSort must not be negative")
	}
	if err := validateSettings(req.SessionSettings, needSettings); err != nil {
		return chatRequest{}, err
	}
	if err := refuseRoles(body, req.SessionSettings); err != nil {
		return chatRequest{}, err
	}
	out := chatRequest{Request: req, branchDefault: req.ActiveBranchName == ""}
	if req.IsDefaultBranch != nil {
		out.branchDefault = *req.IsDefaultBranch
	}
	return out, nil
}

// checkBranchName refuses an activeBranchName longer than maxBranchName
// characters.
func checkBranchName(name string) error {
	if len(name) > maxBranchName && utf8.RuneCountInString(name) > maxBranchName {
		return wire.BadRequest("activeBranchName must be at most %d characters", maxBranchName)
	}
	return nil
}

// decodeAbortRequest decodes and validates an abort request body.
func decodeAbortRequest(body []byte, needSettings bool) (AbortRequest, error) {
	var req AbortRequest
	if err := wire.Unmarshal(body, &req); err != nil {
		return AbortRequest{}, err
	}
	if req.ChatID == "" {
		return AbortRequest{}, wire.BadRequest("chatId is required")
	}
	if !ValidChatID(req.ChatID) {
		return AbortRequest{}, wire.BadRequest("chatId must be 1 to 128 characters of A-Z a-z 0-9 . _ : -")
	}
	if err := validateSettings(req.SessionSettings, needSettings); err != nil {
		return AbortRequest{}, err
	}
	if err := refuseRoles(body, req.SessionSettings); err != nil {
		return AbortRequest{}, err
	}
	return req, nil
}

// refuseRoles applies the rule "with internalId, roles ... cannot be
// specified": the body's sessionSettings.roles, which embedkit has no use
// for otherwise (unknown fields are ignored), is a 400 next to internalId;
// null counts as omitted, as for the other fields internalId forbids. The
// key matches as the other fields do: exactly, after its escapes are
// decoded ("\u0072oles"; "ROLES" is another, unknown field), and any
// occurrence that is not null counts.
func refuseRoles(body []byte, s *SessionSettings) error {
	if s == nil || s.InternalID == "" {
		return nil
	}
	if wire.HasKey(wire.Member(body, "sessionSettings"), "roles") {
		return wire.BadRequest("sessionSettings.roles is not allowed with internalId: the internal user's existing permissions apply")
	}
	return nil
}

func validateSettings(s *SessionSettings, need bool) error {
	if s == nil {
		if need {
			return wire.BadRequest("sessionSettings is required")
		}
		return nil
	}
	if s.EphemeralTTLSeconds != nil {
		ttl := *s.EphemeralTTLSeconds
		if ttl <= 0 || ttl > int64(MaxEphemeralTTL/time.Second) {
			return wire.BadRequest("sessionSettings.ephemeralTtlSeconds must be a positive number of seconds, at most %d", int64(MaxEphemeralTTL/time.Second))
		}
	}
	p := s.provision(time.Time{}, 0)
	return p.Validate()
}

// provision maps the settings to the shared provisioning request. Users are
// ephemeral unless isEphemeral is false; a new ephemeral user expires at
// now+ttl (the request's ttl, else defaultTTL).
func (s *SessionSettings) provision(now time.Time, defaultTTL time.Duration) provision.Request {
	p := provision.Request{
		Fields:          "sessionSettings.",
		ExternalID:      s.ExternalID,
		InternalID:      s.InternalID,
		Email:           s.Email,
		Groups:          s.Groups,
		GroupsSent:      s.Groups != nil,
		SecurityContext: s.SecurityContext,
		Persistent:      s.IsEphemeral != nil && !*s.IsEphemeral,
	}
	if s.UserAttributes != nil {
		p.Attributes = make([]provision.AttributeInput, len(s.UserAttributes))
		for i, a := range s.UserAttributes {
			p.Attributes[i] = provision.AttributeInput{Name: a.Name, Value: rawValue(a.Value)}
		}
	}
	ttl := defaultTTL
	if s.EphemeralTTLSeconds != nil {
		ttl = time.Duration(*s.EphemeralTTLSeconds) * time.Second
	}
	if !p.Persistent {
		p.EphemeralExpiresAt = now.Add(ttl)
	}
	return p
}

// rawValue returns the JSON of an attribute value: as decoded, or encoded
// from a Go value set by a caller of the client.
func rawValue(v any) json.RawMessage {
	switch x := v.(type) {
	case json.RawMessage:
		return x
	case nil:
		return json.RawMessage("null")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage("{}") // rejected by validation
	}
	return b
}

// checkText refuses a request holding a string that is not valid UTF-8,
// before the client encodes it: encoding/json would silently replace the
// invalid bytes with U+FFFD (merging, say, two externalIds that differ only
// in them). The server refuses such text too (400).
func (r *Request) checkText() error {
	for _, f := range []struct{ name, v string }{{"input", r.Input}, {"chatId", r.ChatID}, {"activeBranchName", r.ActiveBranchName}} {
		if !utf8.ValidString(f.v) {
			return wire.BadRequest("%s must be valid UTF-8", f.name)
		}
	}
	return r.SessionSettings.checkText()
}

func (s *SessionSettings) checkText() error {
	if s == nil {
		return nil
	}
	for i, a := range s.UserAttributes {
		if !validValueText(a.Value) {
			return wire.BadRequest("sessionSettings.userAttributes[%d].value must be valid UTF-8", i)
		}
	}
	p := s.provision(time.Time{}, 0)
	return p.CheckText()
}

// validValueText reports whether the strings of an attribute value set by
// a caller are valid UTF-8.
func validValueText(v any) bool {
	switch x := v.(type) {
	case string:
		return utf8.ValidString(x)
	case []string:
		for _, s := range x {
			if !utf8.ValidString(s) {
				return false
			}
		}
	case []any:
		for _, e := range x {
			if !validValueText(e) {
				return false
			}
		}
	case json.RawMessage:
		return utf8.Valid(x)
	}
	return true
}
