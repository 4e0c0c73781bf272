package pgcluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/embedkit/embedkit/chatstream/pgcluster"
	"github.com/embedkit/embedkit/internal/optiontest"
)

// TestInvalidOptionsPanic checks that every invalid option value panics,
// when its With function is called, with a message naming the package, the
// option and the value.
func TestInvalidOptionsPanic(t *testing.T) {
	optiontest.Panics(t, map[string]func(){
		`pgcluster: WithReplicaID: id must not be empty, got ""`:                                       func() { pgcluster.WithReplicaID("") },
		"pgcluster: WithHeartbeat: duration must be positive, got 0s":                                  func() { pgcluster.WithHeartbeat(0) },
		"pgcluster: WithLeaseTimeout: duration must be positive, got -1s":                              func() { pgcluster.WithLeaseTimeout(-time.Second) },
		"pgcluster: WithPublishInterval: duration must be positive, got 0s":                            func() { pgcluster.WithPublishInterval(0) },
		"pgcluster: WithPollInterval: duration must be positive, got -1ns":                             func() { pgcluster.WithPollInterval(-1) },
		"pgcluster: WithRetention: duration must be positive, got 0s":                                  func() { pgcluster.WithRetention(0) },
		"pgcluster: WithLogger: logger must not be nil, got nil (leave the option out to log nothing)": func() { pgcluster.WithLogger(nil) },
	})
}

// TestHeartbeatNotShorterThanLease checks the one rule between two options,
// which New reports as an error before it connects.
func TestHeartbeatNotShorterThanLease(t *testing.T) {
	_, err := pgcluster.New(context.Background(), "postgres://nowhere.invalid/db",
		pgcluster.WithHeartbeat(5*time.Second), pgcluster.WithLeaseTimeout(5*time.Second))
	if err == nil || !strings.Contains(err.Error(), "heartbeat 5s must be shorter than the lease timeout 5s") {
		t.Fatalf("New = %v; want the heartbeat error", err)
	}
}
