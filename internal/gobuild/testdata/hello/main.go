// Command hello prints its version, set with -ldflags=-X=main.version=...
package main

import "fmt"

var version = "dev"

func main() { fmt.Print(version) }
