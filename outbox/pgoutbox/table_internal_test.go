package pgoutbox

import (
	"reflect"
	"strings"
	"testing"
)

// Every statement of a run names its table with the schema findTable found:
// one left unqualified would follow the search_path of the connection it
// runs on, which another user of the pool may have changed.
func TestStatementsNameTheirTableWithItsSchema(t *testing.T) {
	const table = `"svc ""a"""."lily_outbox"`
	v := reflect.ValueOf(on(table))
	for i := range v.NumField() {
		sql := v.Field(i).String()
		if n := strings.Count(sql, "lily_outbox"); n == 0 || n != strings.Count(sql, table) {
			t.Errorf("statement %s names lily_outbox %d times, %d of them as %s:\n%s", v.Type().Field(i).Name, n, strings.Count(sql, table), table, sql)
		}
	}
}
