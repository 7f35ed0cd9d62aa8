package pingmsg

// Written by hand, where the schema would write its output.
func Keep() {}
