// Package secret makes and hashes the secrets of embedkit: session ids,
// tokens and API keys.
package secret

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"log/slog"
)

// Secret is a credential. It redacts itself when printed or logged.
type Secret string

// New returns a new secret of 256 bits from crypto/rand, URL-safe base64
// without padding (43 characters).
func New() Secret {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return Secret(base64.RawURLEncoding.EncodeToString(b[:]))
}

// Hash returns the SHA-256 hash under which a secret is stored.
func Hash(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// Equal compares two hashes in constant time.
func Equal(a, b []byte) bool { return subtle.ConstantTimeCompare(a, b) == 1 }

// String redacts the secret.
func (Secret) String() string { return "[REDACTED]" }

// LogValue redacts the secret in log/slog output.
func (Secret) LogValue() slog.Value { return slog.StringValue("[REDACTED]") }

// Reveal returns the secret's text, for the one place that hands it out.
func (s Secret) Reveal() string { return string(s) }
