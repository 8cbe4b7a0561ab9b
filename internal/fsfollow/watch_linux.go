package fsfollow

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// This file is the Linux watcher, on inotify directly: fsnotify (v1.10)
// keeps the close-write event it can ask inotify for unexported, and the
// close of a file opened for writing is what says a write is over.

// ErrOverflow is reported when the kernel's event queue overflowed: events
// were lost (Follow rescans the folders: see rescan.go).
var ErrOverflow = errors.New("fsfollow: inotify queue overflow, events were lost")

// mask is what a watched folder reports.
const mask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_ATTRIB |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE | unix.IN_DELETE_SELF

// Watcher reports the changes in the folders added to it. Its events end
// when it is closed; Follow reads them.
type Watcher struct {
	closeEvents bool // the end of a write is reported
	events      chan event
	errors      chan error
	snap        *snapshot // what the folders held, for a rescan

	f    *os.File // the inotify instance, read through the runtime poller
	mu   sync.Mutex
	dirs map[int32]string // by watch descriptor
	done chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// New returns a Watcher that watches nothing yet.
func New() (*Watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	w := &Watcher{
		closeEvents: true,
		events:      make(chan event, 64),
		errors:      make(chan error),
		snap:        newSnapshot(),
		f:           os.NewFile(uintptr(fd), "inotify"),
		dirs:        map[int32]string{},
		done:        make(chan struct{}),
	}
	w.wg.Go(w.read)
	return w, nil
}

// Add watches the folder dir (not its subfolders), and records what it
// holds for a rescan. Adding a folder twice is harmless.
func (w *Watcher) Add(dir string) error {
	dir = filepath.Clean(dir)
	if err := w.watch(dir); err != nil {
		return err
	}
	w.snap.add(dir) // once watched: a change from now on is seen either way
	return nil
}

// watch adds the inotify watch of dir.
func (w *Watcher) watch(dir string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var wd int
	err := w.control(func(fd int) (err error) {
		wd, err = unix.InotifyAddWatch(fd, dir, mask|unix.IN_ONLYDIR)
		return err
	})
	if err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	w.dirs[int32(wd)] = dir
	return nil
}

// control runs fn on the inotify descriptor, unless the Watcher is closed.
func (w *Watcher) control(fn func(fd int) error) error {
	rc, err := w.f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// Close stops the watcher and waits for its reader.
func (w *Watcher) Close() error {
	var err error
	w.once.Do(func() {
		close(w.done)
		err = w.f.Close() // ends a Read in progress
		w.wg.Wait()
	})
	return err
}

// read turns inotify's records into events until the Watcher is closed.
func (w *Watcher) read() {
	defer close(w.events)
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				w.send(nil, fmt.Errorf("inotify: %w", err))
			}
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			wd := int32(binary.NativeEndian.Uint32(buf[off:]))
			m := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+nameLen]
			off += unix.SizeofInotifyEvent + nameLen
			if m&unix.IN_Q_OVERFLOW != 0 {
				if !w.send(nil, ErrOverflow) {
					return
				}
				continue
			}
			w.mu.Lock()
			dir, ok := w.dirs[wd]
			if m&unix.IN_IGNORED != 0 { // the folder is gone, or no longer watched
				delete(w.dirs, wd)
			}
			w.mu.Unlock()
			if ok && m&unix.IN_IGNORED != 0 {
				w.snap.drop(dir)
			}
			if !ok || m&unix.IN_IGNORED != 0 {
				continue
			}
			p := dir
			if i := indexNUL(name); i > 0 {
				p = filepath.Join(dir, string(name[:i]))
			}
			if !w.send(&event{path: p, op: opOf(m, p)}, nil) {
				return
			}
		}
	}
}

// opOf classifies an inotify mask.
func opOf(m uint32, p string) op {
	switch {
	case m&unix.IN_MODIFY != 0:
		return opWritten
	case m&unix.IN_CREATE != 0 && m&unix.IN_ISDIR == 0:
		// A regular file is created open, to be written; a symlink (the
		// ConfigMap's "..data_tmp") is whole at once.
		if info, err := os.Lstat(p); err == nil && info.Mode().IsRegular() {
			return opWritten
		}
		return opWhole
	case m&unix.IN_ATTRIB != 0:
		return opAttr
	case m&(unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_DELETE_SELF) != 0:
		return opGone
	default:
		return opWhole
	}
}

// send passes an event or an error on, unless the Watcher is closed first.
func (w *Watcher) send(ev *event, err error) bool {
	if ev != nil {
		select {
		case w.events <- *ev:
			return true
		case <-w.done:
			return false
		}
	}
	select {
	case w.errors <- err:
		return true
	case <-w.done:
		return false
	}
}

func indexNUL(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return len(b)
}
