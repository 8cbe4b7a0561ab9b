// Package safefile reads the files ssrun is pointed at (rule files, test
// files, ssrun.yaml, traces, credentials and tokens) without trusting what
// they are. A rules folder is written by others (a ConfigMap, a deploy
// script, a colleague), and a name that ends in .lua may be a symbolic link
// to /dev/zero, a named pipe, a device or a sparse file of gigabytes:
// read whole with os.ReadFile, the first grows the process without end, the
// second blocks until a writer comes (holding whatever lock its reader
// held), the last costs its size in memory.
//
// Open and Read refuse all of these with an error naming the file:
//
//   - anything but a regular file (after following symbolic links), checked
//     on the path before opening, so that a device is not even opened, and
//     again on the opened descriptor, so that a swap in between is caught;
//   - on Unix the file is opened with O_NONBLOCK, so that opening a named
//     pipe returns at once instead of waiting for a writer;
//   - a file larger than the caller's limit: refused by its size before
//     reading, and its reader stops after limit+1 bytes, so a file that grows
//     while it is read costs at most the limit too.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ErrNotRegular is what a *NotRegularError unwraps to.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is what a *TooLargeError unwraps to.
var ErrTooLarge = errors.New("file too large")

// NotRegularError refuses a file that is not a regular file: a directory, a
// named pipe, a device, a socket.
type NotRegularError struct {
	Path string
	Mode fs.FileMode // its type bits
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s: not a regular file (%s): refused", e.Path, kindOf(e.Mode))
}

// Unwrap returns ErrNotRegular.
func (e *NotRegularError) Unwrap() error { return ErrNotRegular }

// TooLargeError refuses a file larger than the limit its reader allows.
type TooLargeError struct {
	Path  string
	Limit int64
	// Size is the file's size when it was known to be too large before
	// reading; 0 when it grew past the limit while read.
	Size int64
}

func (e *TooLargeError) Error() string {
	if e.Size > 0 {
		return fmt.Sprintf("%s: %d bytes, more than the limit of %s: refused", e.Path, e.Size, Bytes(e.Limit))
	}
	return fmt.Sprintf("%s: more than the limit of %s: refused", e.Path, Bytes(e.Limit))
}

// Unwrap returns ErrTooLarge.
func (e *TooLargeError) Unwrap() error { return ErrTooLarge }

// kindOf names the type of a file mode for people.
func kindOf(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeIrregular != 0:
		return "an irregular file"
	}
	return "type " + m.Type().String()
}

// Bytes renders a limit: in KiB, MiB or GiB when it is a whole number of
// them, else in bytes.
func Bytes(n int64) string {
	for _, u := range []struct {
		size int64
		name string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d %s", n/u.size, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// File is a regular file opened by Open: reading it yields at most its
// limit of bytes, then a *TooLargeError if there is more.
type File struct {
	f     *os.File
	path  string
	limit int64
	left  int64 // bytes that may still be read; -1 once past the limit
	info  fs.FileInfo
}

// Open opens the file at path for reading, following symbolic links,
// after checking that it is a regular file of at most limit bytes (see the
// package comment). Errors name the file: an *fs.PathError from the system,
// a *NotRegularError or a *TooLargeError. Close the file when done.
func Open(path string, limit int64) (*File, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := check(path, info, limit); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|openFlags, 0)
	if err != nil {
		return nil, err
	}
	// The path may have been swapped for something else since the Stat.
	if info, err = f.Stat(); err != nil {
		_ = f.Close()
		return nil, err
	}
	if err := check(path, info, limit); err != nil {
		_ = f.Close()
		return nil, err
	}
	return &File{f: f, path: path, limit: limit, left: limit, info: info}, nil
}

// check refuses what info shows is not a regular file of at most limit.
func check(path string, info fs.FileInfo, limit int64) error {
	if !info.Mode().IsRegular() {
		return &NotRegularError{Path: path, Mode: info.Mode().Type()}
	}
	if info.Size() > limit {
		return &TooLargeError{Path: path, Limit: limit, Size: info.Size()}
	}
	return nil
}

// Stat returns what the opened file was when it was opened.
func (f *File) Stat() fs.FileInfo { return f.info }

// Read implements io.Reader. Past the limit it returns a *TooLargeError.
func (f *File) Read(p []byte) (int, error) {
	if f.left < 0 {
		return 0, &TooLargeError{Path: f.path, Limit: f.limit}
	}
	if int64(len(p)) > f.left+1 {
		p = p[:f.left+1] // one more byte shows whether there is more
	}
	n, err := f.f.Read(p)
	if int64(n) > f.left {
		n, f.left = int(f.left), -1
		return n, &TooLargeError{Path: f.path, Limit: f.limit}
	}
	f.left -= int64(n)
	return n, err
}

// Close closes the file.
func (f *File) Close() error { return f.f.Close() }

// Read reads the whole file at path, refusing what Open refuses, and a
// file that grows past limit while it is read.
func Read(path string, limit int64) ([]byte, error) {
	f, err := Open(path, limit)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, 0, f.info.Size()+1) // +1: the read that sees the end
	for {
		if len(b) == cap(b) { // the file grew since it was opened
			b = append(b, 0)[:len(b)]
		}
		n, err := f.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if errors.Is(err, io.EOF) {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
