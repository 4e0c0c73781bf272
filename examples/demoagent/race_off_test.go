//go:build !race

package demoagent_test

const raceEnabled = false
