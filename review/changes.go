package review

import (
	"fmt"
	"slices"

	"github.com/lily-mq/lily/schema"
)

// Changes lists, in plain sentences, what changed from old to new without
// breaking anything: additions and policy changes a reviewer should see.
// Breaking lists the rest.
func Changes(old, new *schema.File) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	a := additions{add: add, shared: map[string]bool{}}
	for _, nm := range new.Messages {
		om := old.Message(nm.Name)
		if om == nil {
			add("new message %s", nm.Name)
			continue
		}
		// A publish removed or moved is breaking; one added, or a new order
		// key, changes only what producers on the new schema do.
		switch op, np := om.Publish, nm.Publish; {
		case np == nil:
		case op == nil:
			add("%s is published to %s", nm.Name, destination(np))
		case orderKey(op) != orderKey(np):
			add("%s: order key %s → %s", nm.Name, orderKey(op), orderKey(np))
		}
		for _, nv := range nm.Versions {
			ov := findVersion(om, nv.Number)
			switch {
			case ov == nil:
				add("new version %s", nv.GoName)
			default:
				a.fields(ov.Fields, nv.Fields, nv.GoName+" field ")
				a.fields(ov.Headers, nv.Headers, nv.GoName+" header ")
				if ov.DeprecatedSince == "" && nv.DeprecatedSince != "" {
					add("%s is deprecated since %s", nv.GoName, nv.DeprecatedSince)
				}
			}
		}
	}
	for _, nq := range new.Queues {
		oq := old.Queue(nq.Name)
		if oq == nil {
			add("new queue %q", nq.Name)
			continue
		}
		changed := func(what string, o, n any) {
			if o != n {
				add("queue %q: %s %v → %v", nq.Name, what, o, n)
			}
		}
		changed("prefetch", oq.Prefetch, nq.Prefetch)
		changed("concurrency", oq.Concurrency, nq.Concurrency)
		changed("max_attempts", oq.Retry.MaxAttempts, nq.Retry.MaxAttempts)
		changed("handler_timeout", oq.HandlerTimeout, nq.HandlerTimeout)
		changed("settlement_budget", oq.SettlementBudget, nq.SettlementBudget)
		changed("inbox", oq.Inbox, nq.Inbox)
		for _, nc := range nq.Consumes {
			i := slices.IndexFunc(oq.Consumes, func(oc schema.Consume) bool { return oc.Message.Name == nc.Message.Name })
			if i < 0 {
				continue
			}
			// To none, duplicates are handled again; from it, claims begin.
			// A change the queue's own inbox line explains is said once.
			oc := oq.Consumes[i]
			if oc.Inbox != nc.Inbox && (oc.Inbox != oq.Inbox || nc.Inbox != nq.Inbox) {
				add("queue %q: inbox of %s %v → %v", nq.Name, nc.Message.Name, oc.Inbox, nc.Inbox)
			}
		}
		if nq.MaxBodyBytes > oq.MaxBodyBytes {
			changed("max_body_bytes", oq.MaxBodyBytes, nq.MaxBodyBytes)
		}
		// Bucket names follow their delays, so a changed delay declares a
		// new bucket; the old one still returns what it holds to the queue.
		// But for a queue whose Lily arguments go by policy: its new
		// buckets' TTL and dead-lettering are their policies', not yet
		// applied (RETRY-BUCKET-ADDED).
		if !slices.Equal(oq.Retry.Delays, nq.Retry.Delays) {
			then := ""
			if oq.ByPolicy && nq.ByPolicy && len(newBuckets(oq, nq)) > 0 {
				then = "apply the policies lilygen topology writes before deploying, which carry the new buckets' TTL and dead-lettering; "
			}
			add("queue %q: retry delays %v → %v (%sdelete the buckets no longer used once they are empty)", nq.Name, oq.Retry.Delays, nq.Retry.Delays, then)
		}
	}
	return out
}

// additions reports the optional fields a version gained, at any depth;
// required ones are breaking. A shared type's are reported once, named by
// the type (the new one's, when it was renamed), as Breaking reports its
// changes: walked along each path, shared types nested in one another would
// take time exponential in their depth.
type additions struct {
	add    func(string, ...any)
	shared map[string]bool // the pairs of shared types compared so far, old and new name
}

func (a additions) fields(old, new []*schema.Field, prefix string) {
	for _, nf := range new {
		of := findField(old, nf.Name)
		switch {
		case of == nil && !nf.Required:
			a.add("%s%s added (optional)", prefix, nf.Name)
		case of == nil || of.Type != schema.Object || nf.Type != schema.Object:
		case of.Named != "" && nf.Named != "":
			if pair := of.Named + " " + nf.Named; !a.shared[pair] {
				a.shared[pair] = true
				a.fields(of.Fields, nf.Fields, nf.Named+".")
			}
		default:
			a.fields(of.Fields, nf.Fields, prefix+nf.Name+".")
		}
	}
}

// orderKey names pub's order key, or none.
func orderKey(pub *schema.Publish) string {
	if pub.OrderKey == nil {
		return "none"
	}
	return pub.OrderKey.String()
}
