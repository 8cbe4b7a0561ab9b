// Package pluginv1 is the generated Go code of plugin.proto, the gRPC
// surface of ABI v1 for native plugins. The generated files are committed;
// regenerate them after editing plugin.proto with `go generate` in this
// folder. Tools (versions matching google.golang.org/protobuf v1.36.12 and
// google.golang.org/grpc v1.85.0 in go.mod; not module dependencies):
//
//	apt-get install -y protobuf-compiler   # protoc 3.21.12 (Debian 12)
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
//
// The proto path registered with the protobuf runtime is
// "ssrun/plugin/v1/plugin.proto" (package-qualified, so it cannot collide
// with another binary's or library's protos).
package pluginv1

//go:generate protoc -I ../../.. --go_out=../../.. --go_opt=paths=source_relative --go-grpc_out=../../.. --go-grpc_opt=paths=source_relative ../../../ssrun/plugin/v1/plugin.proto
