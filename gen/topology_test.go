package gen

import (
	"fmt"
	"go/ast"
	"go/parser"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/dave/jennifer/jen"

	"github.com/lily-mq/lily/topology"
)

// TestFieldsWritesEveryField sets every field of a topology.Queue, and of
// the exchanges and bindings in it, and wants each written: a field added to
// the package reaches the generated QueueSpec, or fails here.
func TestFieldsWritesEveryField(t *testing.T) {
	var q topology.Queue
	fill(t, reflect.ValueOf(&q).Elem())
	src := fmt.Sprintf("%#v", jen.Qual(topo, "Queue").Values(fields(reflect.ValueOf(q))...))
	expr, err := parser.ParseExpr(src)
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	var got []string
	ast.Inspect(expr, func(n ast.Node) bool {
		if kv, ok := n.(*ast.KeyValueExpr); ok {
			if key, ok := kv.Key.(*ast.Ident); ok {
				got = append(got, key.Name)
			}
		}
		return true
	})
	if want := fieldNames(reflect.TypeFor[topology.Queue]()); !slices.Equal(got, want) {
		t.Errorf("wrote the fields\n%v\nwant\n%v\n%s", got, want, src)
	}
}

// fill sets every field of v, a struct, and one element of each slice.
func fill(t *testing.T, v reflect.Value) {
	for i := range v.NumField() {
		switch f := v.Field(i); f.Kind() {
		case reflect.String:
			f.SetString("x")
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(time.Second))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Map:
			f.Set(reflect.ValueOf(map[string]any{"k": "v"}))
		case reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 1, 1))
			if e := f.Index(0); e.Kind() == reflect.Struct {
				fill(t, e)
			} else {
				e.SetInt(int64(time.Second))
			}
		default:
			t.Fatalf("cannot fill %s", f.Type())
		}
	}
}

// fieldNames lists the fields of typ, a struct, those of a slice's elements
// after the slice's own.
func fieldNames(typ reflect.Type) []string {
	var out []string
	for f := range typ.Fields() {
		out = append(out, f.Name)
		if f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct {
			out = append(out, fieldNames(f.Type.Elem())...)
		}
	}
	return out
}
