package llmagent

import "github.com/embedkit/embedkit/chatstream"

var _ chatstream.DataAgent = (*Agent)(nil)

// DataSource returns the first of the agent's tools, in the order given to
// [New], that is a [chatstream.DataSource] (an analytics.SQLTool is one),
// or nil. So the chat handler's data query API runs queries with the same
// executor, rules and row access as the model's svcSqlApi calls, for every
// account and agent the handler serves.
func (a *Agent) DataSource(accountName, agentID string) chatstream.DataSource {
	for _, n := range a.names {
		if ds, ok := a.tools[n].(chatstream.DataSource); ok {
			return ds
		}
	}
	return nil
}
