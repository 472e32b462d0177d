module github.com/tessera-gpu/tessera

go 1.26.0
