package store

// Lookup names what a provisioning request refers to, so that the request
// can be validated before anything is written: a deployment of the
// account, an embed tenant, and attribute and group definitions of a
// scope, all read at one moment.
type Lookup struct {
	Scope Scope
	// DeploymentID, when not zero, is a deployment of Scope.AccountID to
	// look for.
	DeploymentID int64
	// EmbedTenantName, when not empty, is an embed tenant of
	// Scope.AccountID to look for.
	EmbedTenantName string
	// InEmbedTenant, with EmbedTenantName, looks for AttrNames and
	// GroupNames in that tenant's scope instead of Scope's (none when the
	// tenant does not exist).
	InEmbedTenant bool
	// AttrNames and GroupNames are definition names of Scope; duplicates
	// are allowed.
	AttrNames  []string
	GroupNames []string
}

// LookupResult is the answer to a [Lookup].
type LookupResult struct {
	// Deployment is the deployment asked for; DeploymentFound is false
	// when none was asked for or it does not exist.
	Deployment      Deployment
	DeploymentFound bool
	// EmbedTenant is the embed tenant asked for; EmbedTenantFound is
	// false when none was asked for or it does not exist.
	EmbedTenant      EmbedTenant
	EmbedTenantFound bool
	// Attributes and Groups are the definitions of Lookup.Scope whose names
	// were asked for, in no particular order; names that do not exist are
	// simply absent.
	Attributes []Attribute
	Groups     []Group
}
