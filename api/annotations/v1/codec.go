package v1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// ParseAssignment decodes and validates an AssignmentKey annotation value.
func ParseAssignment(s string) (*Assignment, error) {
	var a Assignment
	if err := decodeStrict(s, &a); err != nil {
		return nil, fmt.Errorf("%s: %w", AssignmentKey, err)
	}
	if err := a.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", AssignmentKey, err)
	}
	return &a, nil
}

// ParseAllocated decodes and validates an AllocatedKey annotation value.
func ParseAllocated(s string) (*Allocated, error) {
	var a Allocated
	if err := decodeStrict(s, &a); err != nil {
		return nil, fmt.Errorf("%s: %w", AllocatedKey, err)
	}
	if err := a.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", AllocatedKey, err)
	}
	return &a, nil
}

// ParseNodeGPUs decodes and validates a NodeGPUsKey annotation value.
func ParseNodeGPUs(s string) (*NodeGPUs, error) {
	var n NodeGPUs
	if err := decodeStrict(s, &n); err != nil {
		return nil, fmt.Errorf("%s: %w", NodeGPUsKey, err)
	}
	if err := n.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", NodeGPUsKey, err)
	}
	return &n, nil
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

// decodeStrict rejects unknown fields and trailing data, so that a value
// written by a newer or confused writer is refused rather than half-read.
func decodeStrict(s string, v any) error {
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("malformed JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("malformed JSON: trailing data after the object")
	}
	return nil
}
