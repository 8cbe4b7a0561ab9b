// Command broken does not compile: gobuild's error must carry the reason.
package main

func main() { undefinedForGobuildTest() }
