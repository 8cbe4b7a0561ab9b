package fsfollow

import (
	"io/fs"
	"syscall"
)

// sysStat returns the change time (ns) and inode of an entry, for a rescan.
func sysStat(info fs.FileInfo) (ctime int64, ino uint64) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0
	}
	return st.Ctim.Nano(), st.Ino
}
