//go:build !tessera_sim

package main

import (
	"fmt"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
)

func simulatedEnvironment(string, *configv1.Config) (*environment, error) {
	return nil, fmt.Errorf("--simulate: this binary was built without the tessera_sim tag")
}
