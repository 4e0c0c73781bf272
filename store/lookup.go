package store

// Lookup names what a provisioning request refers to, so that the request
// can be validated before anything is written: a deployment of the
// account, and attribute and group definitions of a scope.
type Lookup struct {
	Scope Scope
	// DeploymentID, when not zero, is a deployment of Scope.AccountID to
	// look for.
	DeploymentID int64
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
	// Attributes and Groups are the definitions of Lookup.Scope whose names
	// were asked for, in no particular order; names that do not exist are
	// simply absent.
	Attributes []Attribute
	Groups     []Group
}
