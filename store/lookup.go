package store

import "context"

// Lookup is the first step of a provisioning request, before it validates:
// it reads the catalog entries the request names and, optionally, updates
// its returning user (a write). Adapters answer it in as few round trips as
// they can, which is why the three travel together.
type Lookup struct {
	Scope      Scope
	AttrNames  []string
	GroupNames []string
	// ReturningUser, when not nil, is applied exactly as UpsertExternalUser
	// would apply it, but only to an existing, visible user that it leaves
	// persistent or ephemeral as it is: a returning user, to whom no limit
	// applies. Any other case (a new user, an expired ephemeral one, one
	// that becomes persistent) changes nothing and leaves
	// LookupResult.UserUpdated false; the caller then uses
	// UpsertExternalUser, with ExternalUserUpsert.NotReturning set. Inside a
	// transaction the update is undone with it when the caller's validation
	// fails.
	ReturningUser *ExternalUserUpsert
}

// LookupResult is the answer to a [Lookup].
type LookupResult struct {
	// Attributes and Groups are the definitions of Lookup.Scope whose names
	// were asked for, in no particular order; names that do not exist are
	// simply absent.
	Attributes []Attribute
	Groups     []Group
	// User is the updated user when UserUpdated is true.
	User        User
	UserUpdated bool
}

// Provisioning holds the first step of a provisioning request.
type Provisioning interface {
	// Lookup resolves l.AttrNames and l.GroupNames in l.Scope and, with
	// l.ReturningUser, updates a returning user, as documented on [Lookup]:
	// it writes then, and a Store runs it in a transaction of its own. It
	// issues at most one statement per part whatever the number of names;
	// adapters that can send several statements at once do so in one round
	// trip.
	Lookup(ctx context.Context, l Lookup) (LookupResult, error)
}
