package queue

import (
	"fmt"
	"maps"
)

// YieldDLQ returns args, a DLQ's declaration (KeepTypeAndLimit), with key
// set to cur, the value of the queue of that name that exists already (nil:
// it has none; a string type, an int64 limit), when that value loses no copy
// on a RabbitMQ of major version major: a classic or quorum type, and a
// limit that means none. A value that loses copies is refused: refusal says
// why. Both are zero when key is neither the type nor the limit, or args
// hold cur already. The runtime yields so on the broker's 406, and lilygen
// topology when two schemas' queues share a DLQ.
func YieldDLQ(args map[string]any, key string, cur any, major int) (next map[string]any, refusal string) {
	next = maps.Clone(args)
	switch key {
	case "x-queue-type":
		typ, ok := cur.(string)
		if cur == nil {
			typ, ok = Classic, true // RabbitMQ holds no type the same as classic
		}
		if !ok {
			return nil, ""
		}
		if typ != Classic && typ != Quorum {
			// A stream's consumers start at its next offset, and an ACK
			// removes nothing: no read or re-drive of Lily's would see a copy.
			return nil, fmt.Sprintf("the DLQ is of type %q, and only a classic or quorum DLQ can be read, re-driven and emptied", typ)
		}
		next[key] = typ
		if typ != Quorum {
			delete(next, "x-delivery-limit") // a quorum queue's alone
		}
	case "x-delivery-limit":
		// Before 4 a quorum queue without the argument has no limit, and a
		// negative one drops a copy at its first return (3.10.8 drops it at
		// the requeue after one get); from 4 a negative one is none. From 4
		// one without it has RabbitMQ's default of 20, taken all the same: a
		// DLQ declared before an upgrade must not stop its consumer, and a
		// policy of delivery-limit -1, which a declare cannot see, is the
		// remedy that keeps its copies in place.
		if cur == nil {
			delete(next, key)
			break
		}
		n, ok := cur.(int64)
		if !ok {
			return nil, ""
		}
		if n >= 0 {
			return nil, fmt.Sprintf("the DLQ has x-delivery-limit %d: each read of it (a get and a requeue) counts toward the limit, at which the broker drops a copy or dead-letters it away", n)
		}
		if major < 4 {
			return nil, fmt.Sprintf("the DLQ has x-delivery-limit %d, which means no limit only from RabbitMQ 4: before it the broker drops a copy, or dead-letters it away, at its first return, so the first read of it (a get and a requeue) loses it", n)
		}
		next[key] = n
	default:
		return nil, ""
	}
	if maps.Equal(next, args) {
		return nil, ""
	}
	return next, ""
}
