package llmagent_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/embedkit/embedkit/chatstream"
	"github.com/embedkit/embedkit/chatstream/llmagent"
)

// TestDefaultSystemPromptNamesNoSecret: the default prompt says whether
// the user is internal or external, never their values, groups,
// identifiers, e-mail or security context.
func TestDefaultSystemPromptNamesNoSecret(t *testing.T) {
	u := chatstream.User{
		ExternalID: "hans-4711", Email: "hans@example.test", Groups: []string{"sales-emea"},
		Attributes:      map[string]any{"country": "Germany"},
		SecurityContext: json.RawMessage(`{"tenant":"acme-42"}`),
	}
	p := llmagent.DefaultSystemPrompt(chatstream.Turn{User: u})
	if !strings.Contains(p, "external user") {
		t.Errorf("prompt %q does not say the user is external", p)
	}
	for _, leak := range []string{"hans", "4711", "example.test", "sales", "Germany", "acme"} {
		if strings.Contains(p, leak) {
			t.Errorf("prompt names %q: %s", leak, p)
		}
	}
	// The display name reaches the model (decisions §11), quoted.
	u.DisplayName = `Hans "Q" Müller`
	if p := llmagent.DefaultSystemPrompt(chatstream.Turn{User: u}); !strings.Contains(p, `The user's display name is "Hans \"Q\" Müller"`) {
		t.Errorf("prompt does not give the display name: %s", p)
	}
}
