//go:build unix

package wire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"syscall"
	"time"
)

// testHookSpin, if set, is called when a spin finds the socket empty the
// first time (tests).
var testHookSpin func()

// spinRead reads into p what the connection has, trying again while it
// has nothing for up to spin (yielding the processor between tries), and
// never parks: ok false when nothing came within spin or ctx ended first
// (the caller then waits in the poller as usual), or when the connection
// has no file descriptor to try (not a socket of this system).
func (c *Conn[S, R]) spinRead(ctx context.Context, p []byte, spin time.Duration) (n int, ok bool, err error) {
	if c.rc == nil {
		return 0, false, nil
	}
	done := ctx.Done()
	start, spun := time.Now(), false
	rerr := c.rc.Read(func(fd uintptr) bool {
		for {
			k, e := syscall.Read(int(fd), p)
			switch {
			case e == syscall.EINTR:
				continue
			case e == syscall.EAGAIN:
				if !spun {
					spun = true
					if testHookSpin != nil {
						testHookSpin()
					}
				}
				select {
				case <-done:
					return true
				default:
				}
				if time.Since(start) >= spin {
					return true
				}
				runtime.Gosched()
				continue
			case e != nil:
				err, ok = e, true
			case k == 0:
				err, ok = io.EOF, true
			default:
				n, ok = k, true
			}
			return true
		}
	})
	if rerr != nil && !ok { // closed, or a deadline: the poller's read says which
		return 0, false, nil
	}
	if err != nil && !errors.Is(err, io.EOF) {
		err = fmt.Errorf("read: %w", err)
	}
	return n, ok, err
}
