// Command cluster-scheduler is tessera's cluster-level GPU placement engine.
// Subcommands:
//
//	simulate  replay an openb trace with a placement policy (the FGD paper's protocol)
//	bench     quality on every openb variant against the published results, and throughput
//	run       the engine as a Kubernetes scheduler (pods with schedulerName tessera-scheduler)
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
)

type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{
	"simulate": {"replay a pod trace against a cluster with a placement policy", runSimulate},
	"bench":    {"print BENCH lines: quality on the openb traces, throughput and memory", runBench},
	"run":      {"schedule pods of a Kubernetes cluster (see run --help)", runRun},
}

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		return 2
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "cluster-scheduler: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	if err := cmd.run(args[1:], stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "cluster-scheduler %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: cluster-scheduler <command> [flags]\n\ncommands:")
	var names []string
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
}
