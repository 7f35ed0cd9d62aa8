package pgoutbox

// LeaseSQL is the relay's look, for the tests that read its plan.
const LeaseSQL = leaseSQL

// SweepSQL is the relay's sweep of the marks left.
const SweepSQL = sweepSQL

// InlineBytes is the look's budget of properties and bodies returned.
const InlineBytes = inlineBytes
