package priority

import (
	"fmt"

	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
)

// TableFrom builds the resolution table of a scheduler configuration: its
// annotation aliases, its PriorityClass value rows, its default class.
func TableFrom(c *schedv1.PriorityConfig) (*Table, error) {
	names := map[string]Class{}
	for alias, k := range c.Annotation {
		cl, err := ParseClass(string(k))
		if err != nil {
			return nil, fmt.Errorf("priority.annotation[%s]: %w", alias, err)
		}
		names[alias] = cl
	}
	var ths []Threshold
	for i, row := range c.ClassValues {
		cl, err := ParseClass(string(row.Class))
		if err != nil {
			return nil, fmt.Errorf("priority.classValues[%d].class: %w", i, err)
		}
		ths = append(ths, Threshold{Min: row.AtLeast, Class: cl})
	}
	def, err := ParseClass(string(c.DefaultClass))
	if err != nil {
		return nil, fmt.Errorf("priority.defaultClass: %w", err)
	}
	return NewTable(names, ths, def)
}
