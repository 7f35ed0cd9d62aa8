package runtime

import "testing"

// A run keeps the generations revokeAll still has to revoke, and no others:
// each session's channel goes once its generation is revoked.
func TestRunKeepsOnlyGenerationsNotRevoked(t *testing.T) {
	var r run
	first, second := r.newGeneration(), r.newGeneration()
	first.Revoke()
	third := r.newGeneration()
	if len(r.generations) != 2 || r.generations[0] != second || r.generations[1] != third {
		t.Errorf("generations kept: %d, want the second and the third", len(r.generations))
	}
	if first.ID != 1 || second.ID != 2 || third.ID != 3 {
		t.Errorf("ids %d, %d, %d; want 1, 2, 3", first.ID, second.ID, third.ID)
	}
	r.revokeAll()
	if !second.Revoked() || !third.Revoked() {
		t.Error("revokeAll left a generation with its authority")
	}
	if r.newGeneration(); len(r.generations) != 1 {
		t.Errorf("after revokeAll and a new generation, %d kept, want 1", len(r.generations))
	}
}
