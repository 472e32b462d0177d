package priority

import (
	"fmt"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
)

// ComputeTable builds the device plugin's compute priority table
// (configv1.ComputePriorityConfig); all fields empty gives DefaultTable.
func ComputeTable(c configv1.ComputePriorityConfig) (*Table, error) {
	if len(c.Annotation) == 0 && len(c.ClassValues) == 0 && c.DefaultClass == "" {
		return DefaultTable(), nil
	}
	names := map[string]Class{}
	for alias, v := range c.Annotation {
		cl, err := ParseClass(v)
		if err != nil {
			return nil, fmt.Errorf("computePriority.annotation[%s]: %w", alias, err)
		}
		names[alias] = cl
	}
	var ths []Threshold
	for i, row := range c.ClassValues {
		cl, err := ParseClass(row.Class)
		if err != nil {
			return nil, fmt.Errorf("computePriority.classValues[%d].class: %w", i, err)
		}
		ths = append(ths, Threshold{Min: row.AtLeast, Class: cl})
	}
	def := Lowest
	if c.DefaultClass != "" {
		var err error
		if def, err = ParseClass(c.DefaultClass); err != nil {
			return nil, fmt.Errorf("computePriority.defaultClass: %w", err)
		}
	}
	t, err := NewTable(names, ths, def)
	if err != nil {
		return nil, fmt.Errorf("computePriority: %w", err)
	}
	return t, nil
}
