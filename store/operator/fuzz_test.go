package operator_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/embedkit/embedkit/store"
	"github.com/embedkit/embedkit/store/memstore"
	"github.com/embedkit/embedkit/store/operator"
)

// FuzzDecodeConfig: any document is either refused by DecodeConfig, or
// applied by Apply, or refused by Apply with nothing written; no key
// appears in an error.
func FuzzDecodeConfig(f *testing.F) {
	f.Add(demoJSON)
	f.Add(`{"accounts":[{"name":"a","apiKeys":[{"keyHash":"` + operator.HashKey("sk-x") + `","admin":true}]}]}`)
	f.Add(`{"accounts":[{"name":"a","userAttributes":[{"name":"c","type":"string"},{"name":"c","type":"number"}]}]}`)
	f.Add(`{"accounts":[{"name":"a","agents":[{"id":"7","deploymentId":9}],"deployments":[{"id":1}]}]}`)
	f.Add(`{"accounts":[{"name":"a","apiKeys":[{"key":"sk-secret-1","admin":"yes"}]}]}`)
	f.Add(`{"accounts":[{"name":"a","apiKeys":[{"key":"sk-secret-1","key":"sk-secret-2"}]}]}`)
	f.Add(`{"accounts":[{"name":"a","apiKeys":[{"key":"sk-secret-1"}],"x":1}]}`)
	f.Fuzz(func(t *testing.T, doc string) {
		cfg, err := operator.DecodeConfig(strings.NewReader(doc))
		if err != nil {
			for _, k := range keysIn(doc) {
				if strings.Contains(err.Error(), k) {
					t.Fatalf("DecodeConfig's error holds a key: %v", err)
				}
			}
			return
		}
		ctx := context.Background()
		st := memstore.New()
		err = operator.New(st).Apply(ctx, cfg)
		for _, a := range cfg.Accounts {
			for _, k := range a.APIKeys {
				if err != nil && k.Key != "" && len(k.Key) > 3 && strings.Contains(err.Error(), k.Key) {
					t.Fatalf("error holds a key: %v", err)
				}
			}
			_, gerr := st.AccountByName(ctx, a.Name)
			if err == nil && gerr != nil {
				t.Fatalf("applied, but account %q: %v", a.Name, gerr)
			}
			if err != nil && !errors.Is(gerr, store.ErrNotFound) {
				t.Fatalf("Apply failed (%v) but account %q was written", err, a.Name)
			}
		}
		if err == nil {
			// Idempotent.
			if err := operator.New(st).Apply(ctx, cfg); err != nil {
				t.Fatalf("second Apply: %v", err)
			}
		}
	})
}

// keysIn returns the values of the fields named key (of any letter case)
// in doc, read as far as it is JSON, that are long enough to be told from
// the words of a message.
func keysIn(doc string) []string {
	dec := json.NewDecoder(strings.NewReader(doc))
	type level struct{ object, wantKey bool }
	var (
		stack []level
		field string
		keys  []string
	)
	for {
		tok, err := dec.Token()
		if err != nil {
			return keys
		}
		top := len(stack) - 1
		isKey := top >= 0 && stack[top].object && stack[top].wantKey
		if top >= 0 && stack[top].object {
			if d, ok := tok.(json.Delim); !ok || d == '{' || d == '[' {
				stack[top].wantKey = !stack[top].wantKey
			}
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				stack = append(stack, level{object: v == '{', wantKey: true})
			default:
				stack = stack[:top]
			}
		case string:
			if isKey {
				field = v
			} else if strings.EqualFold(field, "key") && len(v) >= 6 {
				keys = append(keys, v)
			}
		}
	}
}
