package confirm

import (
	"math"
	"testing"

	"github.com/lily-mq/lily/internal/frame"
)

// The longest publish id takes what frame.MaxPublishID reserves, no less
// (a message sent would not fit its frame) and no more (a message the
// Publisher sends would be refused by a check that reserves the room, such
// as lilytest.Recorder's).
func TestPublishIDFitsItsReserve(t *testing.T) {
	p := &Publisher{idPrefix: newIDPrefix()}
	if id := p.publishID(math.MaxUint64); len(id) != frame.MaxPublishID {
		t.Errorf("the longest publish id, %q, takes %d bytes; frame.MaxPublishID reserves %d", id, len(id), frame.MaxPublishID)
	}
}
