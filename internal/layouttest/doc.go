// Package layouttest holds tests of the repository's layout: rules about
// which files may import what, checked by parsing the source.
package layouttest
