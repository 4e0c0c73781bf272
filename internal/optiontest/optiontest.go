// Package optiontest checks that invalid option values panic with the
// expected message.
package optiontest

import (
	"slices"
	"testing"
)

// Panics runs one subtest per entry of cases: the function must panic with
// exactly the string it is keyed by.
func Panics(t *testing.T, cases map[string]func()) {
	t.Helper()
	for _, want := range slices.Sorted(func(yield func(string) bool) {
		for k := range cases {
			if !yield(k) {
				return
			}
		}
	}) {
		t.Run(want, func(t *testing.T) {
			defer func() {
				got := recover()
				if got == nil {
					t.Fatalf("no panic; want %q", want)
				}
				if s, ok := got.(string); !ok || s != want {
					t.Fatalf("panic %#v; want %q", got, want)
				}
			}()
			cases[want]()
		})
	}
}
