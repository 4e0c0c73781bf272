// Package nilarg checks the dependencies handed to embedkit's constructors
// (a store, an agent, a cluster), so that a nil one panics when the
// constructor is called instead of on every request: a handler built on a
// nil store would otherwise panic inside each request, leaving the client
// without an answer, and one built on a nil agent would end every turn
// with an error.
package nilarg

import (
	"fmt"
	"reflect"
)

// isNil reports whether v is nil or holds a nil pointer or func: a
// *gormstore.Store left nil by an ignored Open error, or an AgentFunc(nil),
// is not a nil interface but fails on its first method call all the same.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Func:
		return rv.IsNil()
	}
	return false
}

// Check panics when v is nil (see isNil), with the message of an invalid
// argument, fn naming the package and the function ("chatstream:
// NewHandler") and name the argument:
//
//	chatstream: NewHandler: store must not be nil, got nil
//	chatstream: NewHandler: store must not be nil, got (*gormstore.Store)(nil) (was the error of the function that returned it ignored?)
func Check(fn, name string, v any) {
	if !isNil(v) {
		return
	}
	if v == nil {
		panic(fmt.Sprintf("%s: %s must not be nil, got nil", fn, name))
	}
	panic(fmt.Sprintf("%s: %s must not be nil, got (%T)(nil) (was the error of the function that returned it ignored?)", fn, name, v))
}
