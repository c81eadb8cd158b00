package main

// Pins the Lattigo import so `go mod tidy` keeps it while the layer grows.
import _ "github.com/tuneinsight/lattigo/v6/schemes/ckks"
