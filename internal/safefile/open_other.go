//go:build !unix

package safefile

// openFlags: no O_NONBLOCK here (Windows' named pipes are not in the file
// system's folders); the type checks still refuse what is not a file.
const openFlags = 0
