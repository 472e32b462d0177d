// Command pause is the one process of the real node's locally built images:
// the pod sandbox (the pause image, run without arguments) and the test
// workloads. It prints what it was asked to report, then waits for SIGTERM
// or SIGINT and exits 0, so a container stops at once when the kubelet asks.
// Built static (CGO_ENABLED=0): the images hold nothing else.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	say := flag.String("say", "", "a line to print at start")
	stat := flag.String("stat", "", "comma-separated paths whose presence and size to print at start")
	flag.Parse()
	if *say != "" {
		fmt.Println(*say)
	}
	if *stat != "" {
		for _, p := range strings.Split(*stat, ",") {
			st, err := os.Stat(p)
			if err != nil {
				fmt.Printf("stat %s: missing: %v\n", p, err)
				continue
			}
			fmt.Printf("stat %s: present %d bytes\n", p, st.Size())
		}
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	<-sigs
}
