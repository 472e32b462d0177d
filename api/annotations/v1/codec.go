package v1

import (
	"encoding/json"
	"errors"
	"fmt"

	sigsjson "sigs.k8s.io/json"
)

// ParseAssignment decodes and validates an AssignmentKey annotation value.
func ParseAssignment(s string) (*Assignment, error) { return parse[Assignment](AssignmentKey, s) }

// ParseAllocated decodes and validates an AllocatedKey annotation value.
func ParseAllocated(s string) (*Allocated, error) { return parse[Allocated](AllocatedKey, s) }

// ParseNodeGPUs decodes and validates a NodeGPUsKey annotation value.
func ParseNodeGPUs(s string) (*NodeGPUs, error) { return parse[NodeGPUs](NodeGPUsKey, s) }

// parse decodes strictly and validates; errors start with the annotation key.
func parse[T any, P interface {
	*T
	Validate() error
}](key, s string) (*T, error) {
	v := new(T)
	if err := decodeStrict(s, v); err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	if err := P(v).Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return v, nil
}

// Marshal validates v and encodes it as an annotation value. The Version
// field must already be set: writers state the version they speak.
func Marshal(v interface{ Validate() error }) (string, error) {
	if err := v.Validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// decodeStrict rejects unknown fields, duplicate fields, keys that match a
// field only when case is ignored (encoding/json would accept "Containers"),
// and trailing data, so that a value written by a newer or confused writer is
// refused rather than half-read. sigs.k8s.io/json is the decoder the API
// server uses for the same strictness.
func decodeStrict(s string, v any) error {
	strict, err := sigsjson.UnmarshalStrict([]byte(s), v, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return fmt.Errorf("malformed JSON: %w", err)
	}
	if len(strict) > 0 {
		return fmt.Errorf("malformed JSON: %w", errors.Join(strict...))
	}
	return nil
}
