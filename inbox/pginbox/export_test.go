package pginbox

import (
	"context"
	"errors"
)

// Resolve is Commit's look-up of a lost COMMIT's outcome, for the tests
// that ask it about a transaction id of their choosing: the id a failover
// hands out again cannot be had from one server otherwise. It looks in the
// table the inbox's claims pinned.
func (in *Inbox) Resolve(ctx context.Context, consumer, messageID, xid string) error {
	t := in.table.Load()
	if t == nil {
		return errors.New("pginbox: no claim has pinned the inbox's table yet")
	}
	return in.resolve(ctx, claimRow{table: t, consumer: consumer, messageID: messageID, xid: xid}, "asked by the test")
}
