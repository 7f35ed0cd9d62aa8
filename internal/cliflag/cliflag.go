// Package cliflag holds what Lily's commands share in reading their
// arguments.
package cliflag

import "flag"

// ParseInterspersed parses fs's flags wherever they stand among args, so
// that "lilygen breaking x.lily.yaml --against main" and "lilydlq list
// orders.dlq -json" work, and returns the other arguments in order; "--"
// ends flags.
func ParseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		left := fs.Args()
		if len(left) == 0 {
			return rest, nil
		}
		if len(left) < len(args) && args[len(args)-len(left)-1] == "--" {
			return append(rest, left...), nil
		}
		rest, args = append(rest, left[0]), left[1:]
	}
}
