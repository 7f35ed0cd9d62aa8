package runtime

import goruntime "runtime"

// recovered calls f, user code, and returns what it panicked with, nil when
// it returned. recover alone cannot tell: under GODEBUG=panicnil=1, which a
// service may set, a panic(nil) is recovered as nil, yet ended all the same.
// Only a panic resumes here without f returning, so that one is reported as
// the *runtime.PanicNilError Go raises for it otherwise. A runtime.Goexit in
// f is neither: recovered does not return, and the caller's deferred calls
// run without it, as the goroutine ends.
func recovered(f func()) (p any) {
	returned := false
	defer func() {
		if returned {
			return
		}
		// After a Goexit this runs too, but nothing receives p.
		if p = recover(); p == nil {
			p = new(goruntime.PanicNilError)
		}
	}()
	f()
	returned = true
	return nil
}
