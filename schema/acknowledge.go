package schema

import (
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/lily-mq/lily/schema/rules"
)

// acknowledgements reads the breaking changes a schema accepts on purpose:
// each needs its rule and a reason a reviewer can read.
func (p *parser) acknowledgements(n *yaml.Node) []Acknowledgement {
	items, _ := p.seq(n, "acknowledge")
	var out []Acknowledgement
	for _, item := range items {
		m := p.object(item, "acknowledge", "rule", "subject", "reason")
		if m == nil {
			continue
		}
		a := Acknowledgement{Pos: p.pos(item)}
		for _, f := range []struct {
			key string
			dst *string
		}{{"rule", &a.Rule}, {"subject", &a.Subject}, {"reason", &a.Reason}} {
			if e, ok := m[f.key]; ok {
				if *f.dst, ok = p.str(e.v, f.key); ok && *f.dst == "" {
					// An empty subject would accept the rule everywhere, unseen.
					p.errorf(e.v, RuleEmpty, "%s is empty", f.key)
				}
			} else if f.key != "subject" {
				p.errorf(item, RuleMissingKey, "missing %s: an acknowledgement names the rule it accepts and why", f.key)
			}
		}
		if e, ok := m["rule"]; ok && a.Rule != "" {
			if problem, help := AcknowledgementProblem(a.Rule); problem != "" {
				p.errorf(e.v, RuleAcknowledge, "%s", problem).Hint = help
				continue
			}
		}
		if _, hasSubject := m["subject"]; a.Rule != "" && a.Reason != "" && (!hasSubject || a.Subject != "") {
			out = append(out, a)
		}
	}
	return out
}

// AcknowledgementProblem says why an acknowledgement may not name rule, with
// a hint, or returns "" when rule is a breaking-change rule. Lint rules are
// refused: only lilygen breaking reads acknowledgements.
func AcknowledgementProblem(rule string) (problem, help string) {
	r, ok := rules.Lookup(rule)
	switch {
	case !ok:
		return fmt.Sprintf("unknown rule %q", shorten(rule)), new(hinter).hint(rule, rules.Breaking(), "lilygen breaking -h lists the rules")
	case r.Category == rules.Lint:
		return fmt.Sprintf("%s is a lint rule: acknowledge accepts breaking changes only", rule), ""
	}
	return "", ""
}
