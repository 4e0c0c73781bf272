package memstore_test

import (
	"testing"

	"github.com/embedkit/embedkit/internal/optiontest"
	"github.com/embedkit/embedkit/store/memstore"
)

// TestInvalidOptionsPanic checks that a nil clock panics when WithClock is
// called.
func TestInvalidOptionsPanic(t *testing.T) {
	optiontest.Panics(t, map[string]func(){
		"memstore: WithClock: clock must not be nil, got nil": func() { memstore.WithClock(nil) },
	})
}
