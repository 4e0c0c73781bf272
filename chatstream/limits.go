package chatstream

import (
	"net/http"

	"github.com/embedkit/embedkit/internal/wire"
	"github.com/embedkit/embedkit/store"
)

// errThreadTurns and errThreadBytes answer input for a thread at its
// ThreadTurns or ThreadBytes limit.
var (
	errThreadTurns = wire.Limited("threadTurns", wire.Errorf(http.StatusConflict, "thread is full: start a new chat"))
	errThreadBytes = wire.Limited("threadBytes", wire.Errorf(http.StatusConflict, "thread is full: start a new chat"))
)

// threadRoom returns errThreadTurns or errThreadBytes when a thread whose stored messages are
// msgs (decoded: history) has lim.ThreadTurns turns (user messages)
// already, or when the next turn's user echo, of echoSize bytes stored,
// does not fit in what is left of lim.ThreadBytes; non-positive limits are
// off. Otherwise it caps the encoded stream of the next turn (turnCap,
// [WithMaxTurnBytes]) so that its stored messages, about half of its
// stream, stay within what is left of lim.ThreadBytes after the echo.
func threadRoom(msgs []store.ThreadMessage, history []Message, lim store.Limits, turnCap, echoSize int) (int, error) {
	if lim.ThreadTurns <= 0 && lim.ThreadBytes <= 0 {
		return turnCap, nil
	}
	var turns int
	var size int64
	for _, m := range msgs {
		size += int64(len(m.Body))
	}
	for _, m := range history {
		if m.Role == RoleUser {
			turns++
		}
	}
	if lim.ThreadTurns > 0 && turns >= lim.ThreadTurns {
		return 0, errThreadTurns
	}
	size += int64(echoSize)
	if lim.ThreadBytes > 0 && size >= lim.ThreadBytes {
		return 0, errThreadBytes
	}
	if lim.ThreadBytes > 0 {
		turnCap = int(min(int64(turnCap), 2*(lim.ThreadBytes-size)))
	}
	return turnCap, nil
}
