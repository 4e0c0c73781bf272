package gormstore_test

import (
	"testing"
	"time"

	"github.com/embedkit/embedkit/internal/optiontest"
	"github.com/embedkit/embedkit/store/gormstore"
)

// TestInvalidOptionsPanic checks that every invalid option value panics,
// when its With function is called, with a message naming the package, the
// option and the value.
func TestInvalidOptionsPanic(t *testing.T) {
	optiontest.Panics(t, map[string]func(){
		"gormstore: WithQueryTimeout: duration must be positive, got 0s":  func() { gormstore.WithQueryTimeout(0) },
		"gormstore: WithQueryTimeout: duration must be positive, got -1s": func() { gormstore.WithQueryTimeout(-time.Second) },
	})
}
