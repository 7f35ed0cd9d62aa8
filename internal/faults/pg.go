package faults

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// PostgreSQL faults, through psql (no driver needed): dsn is a libpq
// connection string or URL.

// Psql runs sql with psql against dsn and returns its unaligned output.
func Psql(ctx context.Context, dsn, sql string) (string, error) {
	out, err := exec.CommandContext(ctx, "psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-c", sql).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("psql: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// SlowCommitSQL is SQL that makes the COMMIT of a transaction that inserted
// a row of table for which the SQL condition when holds (on NEW; "true" for
// every row) take d: a deferred constraint trigger sleeps at commit time. It
// gives KillInCommit a COMMIT to catch; run it once when creating the table.
func SlowCommitSQL(table string, d time.Duration, when string) string {
	fn := table + "_faults_slow_commit"
	return fmt.Sprintf(`CREATE OR REPLACE FUNCTION %[1]s() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep(%[2]f); RETURN NULL; END $$;
DROP TRIGGER IF EXISTS %[1]s ON %[3]s;
CREATE CONSTRAINT TRIGGER %[1]s AFTER INSERT ON %[3]s DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW WHEN (%[4]s) EXECUTE FUNCTION %[1]s();`, fn, d.Seconds(), table, when)
}

// KillInCommit watches pg_stat_activity for up to within and terminates
// (pg_terminate_backend) the first backend of application whose COMMIT
// sleeps in SlowCommitSQL's trigger (wait event PgSleep); a COMMIT of the
// application that does not sleep there is left alone. It returns the
// backend's pid, or 0 when none slept in time. The client loses its
// connection during COMMIT: its outcome is unknown to it, though here the
// transaction aborts (the backend dies in the trigger, before the commit
// record), which an inbox must find out rather than assume.
func KillInCommit(ctx context.Context, dsn, application string, within time.Duration) (int, error) {
	const poll = 5 * time.Millisecond
	sql := fmt.Sprintf(`CREATE FUNCTION pg_temp.lily_kill_in_commit(app text, tries int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE victim int;
BEGIN
	FOR i IN 1..tries LOOP
		PERFORM pg_stat_clear_snapshot();
		SELECT pid INTO victim FROM pg_stat_activity
		WHERE application_name = app AND state = 'active' AND query ILIKE 'commit%%' AND wait_event = 'PgSleep'
			AND pid <> pg_backend_pid()
		LIMIT 1;
		IF victim IS NOT NULL AND pg_terminate_backend(victim) THEN
			RETURN victim;
		END IF;
		PERFORM pg_sleep(%f);
	END LOOP;
	RETURN 0;
END $$;
SELECT pg_temp.lily_kill_in_commit(%s, %d);`, poll.Seconds(), quote(application), max(int(within/poll), 1))
	out, err := Psql(ctx, dsn, sql)
	if err != nil {
		return 0, err
	}
	lines := strings.Split(out, "\n")
	return strconv.Atoi(strings.TrimSpace(lines[len(lines)-1]))
}

// quote is a SQL string literal.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
