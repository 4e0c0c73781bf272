package demoagent

import "database/sql"

// DBOf exposes the agent's database to the external tests, which check
// results against their own SQL.
func DBOf(a *Agent) *sql.DB { return a.db }
