package store

import (
	"context"
	"encoding/json"
	"time"
)

// User is an external user (ExternalID set) or an internal user (InternalID
// set) of an account.
type User struct {
	ID          int64
	AccountID   int64
	ExternalID  string
	InternalID  string
	Email       string
	DisplayName string
	Picture     string
	// SecurityContext is the JSON object last supplied, or nil.
	SecurityContext json.RawMessage
	// Ephemeral users do not count toward the limit and disappear at
	// ExpiresAt; ExpiresAt is zero for persistent users.
	Ephemeral bool
	ExpiresAt time.Time
	CreatedAt time.Time
	UpdatedAt time.Time
}

// UserKey names a user within an account: an external user by ExternalID
// or an internal user by InternalID. Exactly one of the two is set.
type UserKey struct {
	AccountID  int64
	ExternalID string
	InternalID string
}

// Key returns the key of u.
func (u User) Key() UserKey {
	return UserKey{AccountID: u.AccountID, ExternalID: u.ExternalID, InternalID: u.InternalID}
}

// UserUpsert describes the provisioning of a user: its profile, attribute
// values and memberships, written together. Nil pointer fields preserve
// the stored value; non-nil ones overwrite it.
type UserUpsert struct {
	UserKey
	Email           *string
	DisplayName     *string
	Picture         *string
	SecurityContext json.RawMessage // nil preserves; otherwise a JSON object

	// Attributes sets the values of these attributes (a nil Value clears
	// one); the user's values of other attributes are kept. AttributeIDs
	// are distinct; one whose definition was deleted since the caller
	// looked it up is accepted, and its value is never read.
	Attributes []AttributeValue
	// SetGroups makes Groups (IDs of groups of GroupScope; one deleted
	// since the caller looked it up is ignored) exactly the user's groups
	// within GroupScope; memberships in other
	// scopes are kept. An empty Groups clears them. SetGroups false keeps
	// every membership.
	SetGroups  bool
	GroupScope Scope
	Groups     []int64

	// Persistent true makes an external user persistent (created so, or
	// converted from ephemeral); such a user counts toward MaxUsers.
	// Persistent false creates an ephemeral user expiring at
	// EphemeralExpiresAt, and leaves an existing user (persistent or
	// ephemeral) as it is in that respect. Internal users are always
	// persistent and count toward no limit.
	Persistent         bool
	EphemeralExpiresAt time.Time
	// MaxUsers is the account's limit of persistent external users; 0 or
	// less means no limit.
	MaxUsers int
	// NewEphemeralPerMinute, above zero, limits the ephemeral users of the
	// account created per clock minute (the minute of Now, a fixed window
	// shared by every process using the store). The count is of the
	// ephemeral users created under a limit: one created without a limit
	// is not counted, so an account without a limit keeps no count.
	NewEphemeralPerMinute int
	Now                   time.Time

	// Session, when set, is a new unused session id for the user, stored
	// with the upsert as [Sessions.CreateSession] stores one: both or
	// neither. Its Session.UserID is ignored (the user's is stored).
	Session *NewSession
}

// NewSession is a session id, by its hash, with the grant it carries.
type NewSession struct {
	Hash    []byte
	Session Session
}

// AttributeValue is the value of one attribute for a user. A nil Value
// clears it. Value is the JSON of a string, number, string array or number
// array, already checked against the definition's type.
type AttributeValue struct {
	AttributeID int64
	Value       json.RawMessage
}

// UserAttribute is a stored attribute value with its definition's name and
// type, as handed to agents and shown by whoami.
type UserAttribute struct {
	Name  string
	Type  AttributeType
	Value json.RawMessage
}

// UserData is what a user holds within one scope: its attribute values and
// its groups.
type UserData struct {
	Attributes []UserAttribute // ordered by name
	Groups     []Group         // ordered by name
}

// Users reads and writes users with their attribute values and
// memberships.
type Users interface {
	// UpsertUser creates or updates the user u.UserKey names, with its
	// attribute values and memberships, and returns it. An ephemeral user
	// whose expiry has passed at u.Now is treated as absent: it is deleted
	// with everything it owns and a new user is created. Simultaneous
	// first calls for one key yield one user.
	//
	// Creating a persistent external user, or converting an ephemeral one,
	// when the account already has u.MaxUsers persistent external users is
	// [ErrLimit]; so is creating an ephemeral user when
	// u.NewEphemeralPerMinute users were counted in the current minute.
	// Both are exact under concurrency, and an ErrLimit changes nothing.
	// So does an error storing u.Session (such as [ErrNotFound] for a
	// Session.KeyHash that names no stored key).
	UpsertUser(ctx context.Context, u UserUpsert) (User, error)
	// UserByKey returns the user k names, or [ErrNotFound] when it is
	// missing or is an ephemeral user expired at now.
	UserByKey(ctx context.Context, k UserKey, now time.Time) (User, error)
	// UserByID is UserByKey by the user's ID.
	UserByID(ctx context.Context, id int64, now time.Time) (User, error)
	// UserData returns the user's attribute values of attributes of scope s
	// and its groups of scope s, each ordered by name. A missing user has
	// none.
	UserData(ctx context.Context, userID int64, s Scope) (UserData, error)

	// DeleteUser deletes a user with its attribute values, memberships,
	// sessions, tokens and chat threads. Missing: [ErrNotFound].
	DeleteUser(ctx context.Context, userID int64) error
}
