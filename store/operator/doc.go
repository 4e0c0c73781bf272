// Package operator is how a host sets up and manages its tenants in Go:
// accounts (plan, creator mode, user limit, branches), API keys,
// deployments, agents, internal users and account-wide definitions (groups
// and user attributes). It works on any [store.Store]; every call is one
// transaction, all or nothing.
//
// Two ways, which mix freely:
//
//   - From configuration: [LoadConfig] or [DecodeConfig] read the bootstrap
//     JSON and [Operator.Apply] applies it at every start. The configuration
//     is authoritative for the API keys of the accounts it lists: a key it no
//     longer lists is deleted (401 from then on). Keys may be listed as the
//     secret ("key") or as its hex SHA-256 ("keyHash") so that the file
//     holds no secret.
//   - From code: [Operator.SaveAccount], [Operator.CreateAPIKey] (returns the
//     secret once), [Operator.AddAPIKey], [Operator.APIKeys] (no secrets),
//     [Operator.RevokeAPIKey], [Operator.SaveDeployment], [Operator.SaveAgent],
//     [Operator.SaveInternalUser], [Operator.SaveGroups] and
//     [Operator.SaveAttributes]. Keys made this way are never removed by the
//     configuration.
//
// A revoked key is refused at once by the process that revoked it and, by
// other processes sharing the database, once their API-key caches expire:
// at most 5 seconds (middleware.MaxKeyCacheTTL).
//
// The store keeps API keys only as SHA-256 hashes. Nothing in this package
// logs a key or puts one in an error.
package operator
