module github.com/tessera-gpu/tessera

go 1.26.0

require golang.org/x/sys v0.48.0 // indirect
