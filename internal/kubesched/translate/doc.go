// Package translate turns Kubernetes objects into the scheduling engine's
// terms and back: a Node's tessera.io/node-gpus inventory and allocatable
// into a partition.NodeSpec (inventory.go), a Pod's tessera.io resources and
// annotations into an engine.Pod (pod.go), a placement.Decision into the
// tessera.io/assignment annotation and a bound pod's assignment or
// allocation back into a Decision (assignment.go). Every error names the
// object and the field, so an event or log line can say what is wrong.
package translate
