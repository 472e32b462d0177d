// Package b is input for TestCodeNamesSeeConstants: a constant built from
// another package's.
package b

import "example.invalid/a"

const Other = a.Domain + "other-pkg"
