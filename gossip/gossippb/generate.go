// Package gossippb holds the Go code generated from gossip.proto, gpumesh's
// versioned wire schema. Do not edit gossip.pb.go by hand: change
// gossip.proto and run `go generate ./gossip/...` with protoc
// (apt-get install protobuf-compiler) and protoc-gen-go v1.36.12
// (go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12) on PATH.
package gossippb

//go:generate protoc --go_out=. --go_opt=paths=source_relative gossip.proto
