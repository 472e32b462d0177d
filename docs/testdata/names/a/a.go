// Package a is input for TestCodeNamesSeeConstants.
package a

const (
	Domain = "tessera.io/"
	New    = Domain + "gpu-new"
	MIG    = (Domain + "mig-") + suffix
	suffix = "x"
	Lit    = "tessera.io/lit"
	notAll = Domain + "not" + unknown
)

var unknown = "-var"
