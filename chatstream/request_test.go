package chatstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/embedkit/embedkit/internal/wire"
)

// FuzzDecodeChatRequest checks that the decoder never panics and that every
// rejection is a 4xx *wire.Error.
func FuzzDecodeChatRequest(f *testing.F) {
	seeds := []string{
		`{"input":"What is revenue by country?","sessionSettings":{"externalId":"jane","userAttributes":[{"name":"country","value":"DE"}],"groups":["sales"],"isEphemeral":false}}`,
		`{"chatId":"chat-1700000000000","sessionSettings":{"internalId":"alice@acme.test"}}`,
		`{"input":"x","chatId":"","sessionSettings":{"externalId":"a","ephemeralTtlSeconds":3600}}`,
		`{"input":"x","activeBranchName":"dev-1","isDefaultBranch":false,"resumeAfterSort":12,"sessionSettings":{"externalId":"a","securityContext":{"k":1}}}`,
		`{"input":5}`, `[]`, `{`, `null`, `{"sessionSettings":{"userAttributes":[{"name":1}]}}`,
		`{"sessionSettings":{"externalId":"a","userAttributes":[{"name":"n","value":[1,"x"]}]}}`,
		`{"sessionSettings":{"externalId":"a","ephemeralTtlSeconds":1e40}}`,
		"{\"input\":\"a\xffb\",\"sessionSettings\":{\"externalId\":\"a\"}}",
		`{"input":"\ud800","sessionSettings":{"externalId":"a\udfff"}}`,
		`{"input":"` + strings.Repeat("ü", 16384) + `","sessionSettings":{"externalId":"a","email":"` + strings.Repeat("é", 321) + `"}}`,
		`{"input":"x","sessionSettings":{"externalId":"a","groups":[` + strings.Repeat(`"g",`, 500) + `"g"]}}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, needSettings bool) {
		req, err := decodeChatRequest(body, needSettings)
		if err != nil {
			we, ok := errors.AsType[*wire.Error](err)
			if !ok || we.Status < 400 || we.Status > 499 {
				t.Fatalf("rejection %v (%T) is not a 4xx *wire.Error", err, err)
			}
			return
		}
		if req.ChatID != "" && !ValidChatID(req.ChatID) {
			t.Fatalf("accepted invalid chatId %q", req.ChatID)
		}
		if len(req.Input) > MaxInputBytes || !utf8.ValidString(req.Input) || utf8.RuneCountInString(req.ActiveBranchName) > 255 {
			t.Fatalf("accepted input of %d bytes or a long branch name", len(req.Input))
		}
		spelledFFFD := bytes.Contains(body, []byte("\uFFFD")) || bytes.Contains(bytes.ToLower(body), []byte(`\ufffd`))
		for _, s := range []string{req.Input, req.ActiveBranchName} {
			if !spelledFFFD && strings.ContainsRune(s, utf8.RuneError) {
				t.Fatalf("accepted replaced text %q", s)
			}
		}
		if s := req.SessionSettings; s != nil {
			if utf8.RuneCountInString(s.ExternalID) > 255 || utf8.RuneCountInString(s.InternalID) > 255 ||
				(s.Email != nil && utf8.RuneCountInString(*s.Email) > 320) || len(s.Groups) > 500 || len(s.UserAttributes) > 500 {
				t.Fatalf("accepted settings over a limit: %+v", s)
			}
			for _, v := range append([]string{s.ExternalID, s.InternalID}, s.Groups...) {
				if !utf8.ValidString(v) || (!spelledFFFD && strings.ContainsRune(v, utf8.RuneError)) {
					t.Fatalf("accepted replaced text %q", v)
				}
			}
		}
		if needSettings && req.SessionSettings == nil {
			t.Fatal("accepted a request without sessionSettings")
		}
		if _, err := decodeAbortRequest(body, needSettings); err != nil {
			if we, ok := errors.AsType[*wire.Error](err); !ok || we.Status/100 != 4 {
				t.Fatalf("abort rejection %v is not a 4xx *wire.Error", err)
			}
		}
	})
}

func TestValidChatID(t *testing.T) {
	for id, want := range map[string]bool{
		"": false, "a": true, "chat-1700000000000": true, "A.b_c:d-e": true,
		"0f8fad5b-d9cb-469f-a165-70867728950e": true, "a b": false, "a/b": false, "ä": false,
		string(make([]byte, 129)): false,
	} {
		if got := ValidChatID(id); got != want {
			t.Errorf("ValidChatID(%q) = %v, want %v", id, got, want)
		}
	}
}

// TestUserAttributeKeysNameFieldsExactly: an entry of
// sessionSettings.userAttributes decodes itself (UserAttribute.UnmarshalJSON)
// through encoding/json, which folds letter case; "NAME" and "Value" are
// unknown fields all the same, ignored rather than read into name or value.
func TestUserAttributeKeysNameFieldsExactly(t *testing.T) {
	for _, body := range []string{
		`{"input":"x","sessionSettings":{"externalId":"u","userAttributes":[{"name":"region","NAME":"tier","value":"eu"}]}}`,
		`{"input":"x","sessionSettings":{"externalId":"u","userAttributes":[{"NAME":"tier","name":"region","value":"eu","Value":"us"}]}}`,
	} {
		req, err := decodeChatRequest([]byte(body), true)
		if err != nil {
			t.Errorf("%s: %v", body, err)
			continue
		}
		if a := req.SessionSettings.UserAttributes[0]; a.Name != "region" || string(a.Value.(json.RawMessage)) != `"eu"` {
			t.Errorf("%s: decoded as name %q value %s", body, a.Name, a.Value)
		}
	}
	body := `{"input":"x","sessionSettings":{"externalId":"u","userAttributes":[{"name":"region","value":"eu","value":"us"}]}}`
	if _, err := decodeChatRequest([]byte(body), true); err == nil || !strings.Contains(err.Error(), "field sessionSettings.userAttributes[0].value appears more than once") {
		t.Errorf("%s: %v", body, err)
	}
}

// TestWrongTypeInAttributeNamesIt: a wrong type inside a user attribute,
// which decodes itself (so encoding/json's offset counts from the start
// of the attribute), names the attribute's field with its index, never
// another.
func TestWrongTypeInAttributeNamesIt(t *testing.T) {
	for _, c := range []struct{ body, field string }{
		{`{"input":"xxxxxxxxxx","sessionSettings":{"externalId":"u","userAttributes":[{"name":5}]}}`, "userAttributes[0]"},
		{`{"chatId":"abc","sessionSettings":{"externalId":"u","userAttributes":[{"name":"a","value":1},{"name":7}]}}`, "userAttributes[1]"},
		{`{"chatId":"abc","sessionSettings":{"externalId":"u","userAttributes":[{"name":null,"value":1},{"name":[]}]}}`, "userAttributes[1]"},
		// The offset within the second entry falls on the first entry's name.
		{`{"chatId":"abc","sessionSettings":{"externalId":"u","userAttributes":[{"name":"` + strings.Repeat("A", 300) + `"},{"value":"` + strings.Repeat("B", 180) + `","name":7}]}}`, "userAttributes[1]"},
	} {
		_, err := decodeChatRequest([]byte(c.body), true)
		want := "field sessionSettings." + c.field + ".name has the wrong type: string expected"
		if status, msg := wire.Status(err); status != 400 || msg != want {
			t.Errorf("%s: %d %q, want %q", c.body, status, msg, want)
		}
	}
}
