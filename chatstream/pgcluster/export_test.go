package pgcluster

import (
	"context"

	"github.com/embedkit/embedkit/chatstream"
)

// Ask is what the first Next of rt does before it reads: it asks the
// turn's owner for the turn's lines, so that a test can have them written
// before it ends the turn. It reports false when the turn is not live.
func Ask(ctx context.Context, rt chatstream.RemoteTurn) (bool, error) {
	return rt.(*remoteTurn).ask(ctx)
}
