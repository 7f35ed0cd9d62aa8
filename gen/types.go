package gen

import (
	"fmt"

	"github.com/dave/jennifer/jen"

	"github.com/lily-mq/lily/schema"
)

// sharedTypes emits, once, each shared type some message version uses: its
// enum, or its struct with those of the object fields inside it, their
// enums and patterns, and their readers (and the checks of their values that
// the messages' producers call). A type no version uses would be
// dead code, so it is left out.
func sharedTypes(j *jen.File, f *schema.File, checks marshalChecks) {
	produced := producedTypes(f)
	for _, t := range f.UsedTypes() {
		doc := fmt.Sprintf("%s is a shared %s, the Go type of every field of type %s", t.GoPath, t.Type, t.Named)
		if t.Type == schema.Enum {
			enum(j, t, doc)
			continue
		}
		objs := objects(object{name: t.GoPath, doc: doc + ".", fields: t.Fields})
		for _, o := range objs {
			comment(j, o.doc)
			structType(j, o, func(*jen.Group) {})
		}
		walk(t.GoPath, "field", t.Fields, enumsAndPatterns(j))
		for _, o := range objs {
			reader(j, o)
			if produced[t.Named] {
				marshalCheck(j, checks, o)
			}
		}
	}
}
