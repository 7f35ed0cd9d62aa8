package pgoutbox

// LeaseSQL is the relay's look, for the tests that read its plan.
const LeaseSQL = leaseSQL
