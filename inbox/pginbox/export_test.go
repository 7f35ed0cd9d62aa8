package pginbox

import "context"

// Resolve is Commit's look-up of a lost COMMIT's outcome, for the tests
// that ask it about a transaction id of their choosing: the id a failover
// hands out again cannot be had from one server otherwise.
func (in *Inbox) Resolve(ctx context.Context, consumer, messageID, xid string) error {
	return in.resolve(ctx, claimRow{consumer: consumer, messageID: messageID, xid: xid}, "asked by the test")
}
