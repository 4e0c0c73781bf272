package demoagent_test

import (
	"testing"
	"time"

	"github.com/embedkit/embedkit/examples/demoagent"
)

// TestInvalidOptionsPanic checks that every invalid option value panics,
// when its With function is called, with a message naming the package, the
// option and the value.
func TestInvalidOptionsPanic(t *testing.T) {
	for want, call := range map[string]func(){
		"demoagent: WithDelay: duration must not be negative, got -1ms": func() { demoagent.WithDelay(-time.Millisecond) },
		"demoagent: WithRowLimit: count must be positive, got 0":        func() { demoagent.WithRowLimit(0) },
	} {
		t.Run(want, func(t *testing.T) {
			defer func() {
				if got := recover(); got != want {
					t.Errorf("panic %#v; want %q", got, want)
				}
			}()
			call()
		})
	}
}
