package analytics

import "testing"

// TestXMLTablePlanned: a table function scan other than JSON_TABLE's, at
// any depth of the plan, and nothing else, whatever the plan's other
// values say.
func TestXMLTablePlanned(t *testing.T) {
	for _, tc := range []struct {
		plan string
		want bool
	}{
		{`[{"Plan": {"Node Type": "Result", "Plan Rows": 1}}]`, false},
		{`[{"Plan": {"Node Type": "Table Function Scan", "Table Function Name": "xmltable", "Alias": "x"}}]`, true},
		{`[{"Plan": {"Node Type": "Result", "Plans": [{"Node Type": "Aggregate", "Plans": [{"Node Type": "Table Function Scan", "Table Function Name": "xmltable"}]}]}}]`, true},
		{`[{"Plan": {"Node Type": "Table Function Scan", "Table Function Name": "json_table"}}]`, false},
		{`[{"Plan": {"Node Type": "Append", "Plans": [{"Node Type": "Table Function Scan", "Table Function Name": "json_table"}, {"Node Type": "Table Function Scan", "Table Function Name": "xmltable"}]}}]`, true},
		// Names a query chooses are values of other keys.
		{`[{"Plan": {"Node Type": "Subquery Scan", "Alias": "Table Function Scan", "Output": ["Node Type", "Table Function Scan"]}}]`, false},
		{`[{"Plan": {"Node Type": "Subquery Scan", "Alias": "Node Type", "Subplan Name": "Table Function Scan"}}]`, false},
		{`[{"Plan": {"Node Type": "Table Function Scan", "Alias": "json_table", "Table Function Name": "xmltable"}}]`, true},
	} {
		got, err := xmlTablePlanned([]byte(tc.plan))
		if err != nil || got != tc.want {
			t.Errorf("%s: %v, %v; want %v", tc.plan, got, err, tc.want)
		}
	}
	if _, err := xmlTablePlanned([]byte(`[{"Plan": `)); err == nil {
		t.Error("a cut plan: no error")
	}
}
