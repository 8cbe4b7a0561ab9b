//go:build !wasip1

package ssrun

import "sync"

// Outside wasip1 the guard is a mutex (see guard_wasip1.go).
var mu sync.Mutex

func enter() { mu.Lock() }
func leave() { mu.Unlock() }
