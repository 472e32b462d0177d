// Command render-manifests writes what `make manifests` keeps checked in:
// deploy/manifests/<name>.yaml, the chart rendered by helm for its default
// values and for each ci/*-values.yaml, and the values reference table in
// docs/operator-guide.md generated from values.yaml's comments. The chart
// package's tests fail when either is out of step.
//
//	render-manifests --helm $HELM --root .
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tessera-gpu/tessera/deploy/chart"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "render-manifests:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("render-manifests", flag.ContinueOnError)
	helm := fs.String("helm", "helm", "helm binary")
	root := fs.String("root", ".", "repository root")
	if err := fs.Parse(args); err != nil {
		return err
	}
	chartDir := filepath.Join(*root, "deploy", "helm", "tessera")
	manifests := filepath.Join(*root, "deploy", "manifests")
	values, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		return err
	}
	vs, err := chart.Values(values)
	if err != nil {
		return err
	}
	guide := filepath.Join(*root, "docs", "operator-guide.md")
	doc, err := os.ReadFile(guide)
	if err != nil {
		return err
	}
	updated, err := chart.ReplaceTable(string(doc), chart.ValuesTable(vs))
	if err != nil {
		return fmt.Errorf("%s: %w", guide, err)
	}
	if err := os.WriteFile(guide, []byte(updated), 0o644); err != nil {
		return err
	}
	fmt.Println("wrote the values reference of", guide)
	renderings, err := chart.Renderings(chartDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		return err
	}
	for _, r := range renderings {
		out, err := chart.Template(*helm, chartDir, r)
		if err != nil {
			return err
		}
		path := chart.ManifestPath(manifests, r)
		if err := os.WriteFile(path, append([]byte(chart.Header(r)), out...), 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", path)
	}
	return nil
}
