package gen

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dave/jennifer/jen"

	"github.com/lily-mq/lily/schema"
)

func fieldError(path, problem jen.Code) jen.Code {
	return jen.Op("&").Qual(wire, "FieldError").Values(jen.Id("Path").Op(":").Add(path), jen.Id("Problem").Op(":").Add(problem))
}

// failWith returns a FieldError at path, after zero (the function's first
// result) unless zero is nil.
func failWith(zero jen.Code, path, problem string) jen.Code {
	err := fieldError(jen.Lit(path), jen.Lit(problem))
	if path == "" { // an element's: the runtime adds its path
		err = jen.Op("&").Qual(wire, "FieldError").Values(jen.Id("Problem").Op(":").Lit(problem))
	}
	if zero == nil {
		return jen.Return(err)
	}
	return jen.Return(zero, err)
}

// enumCheck fails unless v, a string, is one of f's values.
func enumCheck(f *schema.Field, v jen.Code, path string, zero jen.Code) jen.Code {
	values := make([]jen.Code, len(f.Values))
	for i, val := range f.Values {
		values[i] = jen.Lit(val)
	}
	return jen.Switch(v).Block(
		jen.Case(values...),
		jen.Default().Block(failWith(zero, path, f.EnumProblem())),
	)
}

// describe states f's bounds, its elements', pattern and default for the
// comment of its struct field, such as "at most 10 items, each at most 20
// characters".
func describe(f *schema.Field) string {
	var parts []string
	if b := strings.Join(nonEmpty(bounds(f), elements(f)), ", "); b != "" {
		parts = append(parts, b)
	}
	if f.Pattern != "" {
		parts = append(parts, "matches "+commentText(f.Pattern))
	}
	if f.Default != nil {
		// Said so, because a producer leaving the field unset sends its zero
		// value, which a consumer reads as sent: the default fills only a
		// key that is absent.
		parts = append(parts, fmt.Sprintf("%#v when absent; sent as set", f.Default))
	}
	if f.Nullable && f.Required {
		parts = append(parts, "present, may be null")
	}
	return strings.Join(parts, "; ")
}

// bounds states f's own length, range or item-count bounds, or "".
func bounds(f *schema.Field) string {
	l := f.Limits()
	unit := func(n string) string {
		if n == "1" {
			return strings.TrimSuffix(l.Unit, "s")
		}
		return l.Unit
	}
	switch {
	case l.Lo != "" && l.Lo == l.Hi:
		return "exactly " + l.Lo + unit(l.Lo)
	case l.Lo != "" && l.Hi != "":
		return l.Lo + " to " + l.Hi + l.Unit
	case l.Lo != "":
		return "at least " + l.Lo + unit(l.Lo)
	case l.Hi != "":
		return "at most " + l.Hi + unit(l.Hi)
	}
	return ""
}

// elements states what the extractor checks of each element of list or map
// f, such as "each at most 20 characters and matching ^[a-z]+$", or "".
// An object element's struct and an enum's type state their own.
func elements(f *schema.Field) string {
	if f.Type != schema.List && f.Type != schema.Map {
		return ""
	}
	it := f.Items
	own := nonEmpty(bounds(it))
	if it.Pattern != "" {
		own = append(own, "matching "+commentText(it.Pattern))
	}
	inner := elements(it)
	switch {
	case len(own) > 0:
		return strings.Join(nonEmpty("each "+strings.Join(own, " and "), inner), ", ")
	case inner != "":
		return "in each, " + inner
	}
	return ""
}

func nonEmpty(s ...string) []string {
	return slices.DeleteFunc(s, func(s string) bool { return s == "" })
}

// checks emits the bound checks of value v of field f at path, failing
// with zero as the function's first result (none if nil).
func checks(f *schema.Field, v jen.Code, path string, zero jen.Code) []jen.Code {
	l := f.Limits()
	subject := jen.Add(v)
	if f.Type == schema.String {
		subject = jen.Qual("unicode/utf8", "RuneCountInString").Call(v)
	}
	var out []jen.Code
	switch {
	case l.Lo == "" && l.Hi == "":
	case l.Hi == "":
		out = append(out, jen.If(subject.Op("<").Id(l.Lo)).Block(failWith(zero, path, l.LoProblem)))
	case l.Lo == "":
		out = append(out, jen.If(subject.Op(">").Id(l.Hi)).Block(failWith(zero, path, l.HiProblem)))
	default:
		// Both bounds share one count of a string's characters.
		var init jen.Code = jen.Null()
		if f.Type == schema.String {
			init, subject = jen.Id("n").Op(":=").Add(subject), jen.Id("n")
		}
		out = append(out, jen.Switch(init, jen.Empty()).Block(
			jen.Case(jen.Add(subject).Op("<").Id(l.Lo)).Block(failWith(zero, path, l.LoProblem)),
			jen.Case(jen.Add(subject).Op(">").Id(l.Hi)).Block(failWith(zero, path, l.HiProblem)),
		))
	}
	if f.Pattern != "" {
		out = append(out, jen.If(jen.Op("!").Id(patternVar(f)).Dot("MatchString").Call(v)).Block(failWith(zero, path, f.PatternProblem())))
	}
	return out
}
