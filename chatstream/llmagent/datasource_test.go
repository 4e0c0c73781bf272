package llmagent_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/llmagent"
)

type plainTool struct{ name string }

func (t plainTool) Name() string               { return t.name }
func (t plainTool) Description() string        { return "a tool" }
func (t plainTool) Parameters() map[string]any { return map[string]any{"type": "object"} }
func (t plainTool) Call(context.Context, chatstream.Turn, json.RawMessage) (any, error) {
	return "ok", nil
}

// sourceTool is a tool that is also a data source, as analytics.SQLTool is.
type sourceTool struct{ plainTool }

func (sourceTool) QueryData(context.Context, chatstream.Turn, string, time.Duration) (chatstream.DataRows, error) {
	return nil, &chatstream.QueryError{Msg: "unused"}
}

// TestDataSource checks that the agent's data source, for the data query
// API, is its first tool that is a chatstream.DataSource, and nil without
// one.
func TestDataSource(t *testing.T) {
	src := sourceTool{plainTool{"svcSqlApi"}}
	a := llmagent.New("http://127.0.0.1:1/v1", "m", []llmagent.Tool{plainTool{"svcMeta"}, src, sourceTool{plainTool{"other"}}})
	if got := a.DataSource("acme", "7"); got != chatstream.DataSource(src) {
		t.Errorf("DataSource = %v, want the svcSqlApi tool", got)
	}
	if got := llmagent.New("http://127.0.0.1:1/v1", "m", []llmagent.Tool{plainTool{"svcMeta"}}).DataSource("acme", "7"); got != nil {
		t.Errorf("DataSource without a source tool = %v, want nil", got)
	}
}
