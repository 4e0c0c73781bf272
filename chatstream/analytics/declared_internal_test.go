package analytics

import "testing"

// TestDeclaredType checks the column types of SQLite's declared types:
// what the values of such a column give, where SQLite's rules of type
// affinity tell.
func TestDeclaredType(t *testing.T) {
	for decl, want := range map[string]string{
		"INTEGER": "number", "int": "number", "BIGINT": "number", "VARCHAR(20)": "string", "text": "string", "CLOB": "string",
		"BLOB": "", "": "", "REAL": "number", "DOUBLE PRECISION": "number", "FLOAT": "number", "NUMERIC": "number",
		"DECIMAL(10,2)": "number", "BOOLEAN": "number", "DATE": "", "DATETIME": "", "TIMESTAMP": "", "JSON": "", "UUID": "", "STRING": "",
		"POINT": "number", // contains INT: SQLite's rule 1
	} {
		if got := declaredType(decl); got != want {
			t.Errorf("declaredType(%q) = %q, want %q", decl, got, want)
		}
	}
}
