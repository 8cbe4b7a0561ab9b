package fsfollow

import (
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// A rescan stands in for the events the kernel dropped when its event queue
// overflowed (ErrOverflow): the Watcher records what each folder it watches
// holds when it is added, Follow records again each path it reports, and on
// an overflow Follow reads the folders again and treats what differs as
// events: a new or changed file as written (reported once closed, or after
// Options.OpenQuiet), a new or changed link or folder as whole, a missing
// entry as removed (reported after Options.Quiet).
//
// An entry differs when its type or permissions, size, modification time,
// link target, or (on Linux) inode or change time differ. The change time
// cannot be set back by a program, so on Linux a rewrite is always seen,
// except one in the same tick of the file system's clock as the entry was
// recorded; an entry recorded within racyWindow of its last change is
// therefore reported by the next rescan whether or not it differs (a change
// reported twice reads the same content twice). Elsewhere, a rewrite that
// keeps the size and sets the modification time back (cp -p over the file)
// is not seen.

// racyWindow bounds how coarse a file system's clock may be: a change this
// close to when its entry was recorded may have been followed by another
// in the same tick that left the same times.
const racyWindow = 2 * time.Second

// entry is what a rescan compares of one folder entry.
type entry struct {
	mode   fs.FileMode
	size   int64
	mtime  int64 // ns
	ctime  int64 // ns; 0 where not known
	ino    uint64
	target string // of a symlink
	racy   bool   // changed within racyWindow of being recorded
}

// snapshot is what the watched folders held when last read, by folder
// then name. It is safe for concurrent use.
type snapshot struct {
	racy time.Duration // racyWindow; tests shorten it

	mu   sync.Mutex
	dirs map[string]map[string]entry
}

func newSnapshot() *snapshot {
	return &snapshot{racy: racyWindow, dirs: map[string]map[string]entry{}}
}

// add records what dir holds, unless it is recorded already. A folder that
// cannot be read is recorded empty.
func (s *snapshot) add(dir string) {
	s.mu.Lock()
	_, ok := s.dirs[dir]
	s.mu.Unlock()
	if ok {
		return
	}
	m, _ := s.read(dir)
	if m == nil {
		m = map[string]entry{}
	}
	s.mu.Lock()
	if _, ok := s.dirs[dir]; !ok {
		s.dirs[dir] = m
	}
	s.mu.Unlock()
}

// drop forgets dir (it is no longer watched).
func (s *snapshot) drop(dir string) {
	s.mu.Lock()
	delete(s.dirs, dir)
	s.mu.Unlock()
}

// note records again the paths whose change is being reported.
func (s *snapshot) note(paths []string) {
	now := time.Now()
	for _, p := range paths {
		dir, name := filepath.Split(p)
		dir = filepath.Clean(dir)
		s.mu.Lock()
		_, ok := s.dirs[dir]
		s.mu.Unlock()
		if !ok {
			continue
		}
		info, err := os.Lstat(p)
		s.mu.Lock()
		if m := s.dirs[dir]; m != nil {
			if err != nil {
				delete(m, name)
			} else {
				m[name] = s.entryOf(p, info, now)
			}
		}
		s.mu.Unlock()
	}
}

// rescan reads every recorded folder again, records what it holds, and
// returns what differs from the record as events: a folder that cannot be
// read any more is dropped, its entries removed.
func (s *snapshot) rescan() []event {
	s.mu.Lock()
	dirs := make([]string, 0, len(s.dirs))
	for d := range s.dirs {
		dirs = append(dirs, d)
	}
	s.mu.Unlock()
	var evs []event
	for _, dir := range dirs {
		now, err := s.read(dir)
		s.mu.Lock()
		old, ok := s.dirs[dir]
		if !ok { // dropped meanwhile
			s.mu.Unlock()
			continue
		}
		if err != nil {
			delete(s.dirs, dir)
		} else {
			s.dirs[dir] = now
		}
		s.mu.Unlock()
		evs = appendChanges(evs, dir, old, now)
	}
	return evs
}

// appendChanges appends to evs what differs between the entries of dir
// recorded before, old, and now.
func appendChanges(evs []event, dir string, old, now map[string]entry) []event {
	for name, e := range now {
		if o, ok := old[name]; !ok || !o.same(e) {
			op := opWhole
			if e.mode.IsRegular() {
				op = opWritten // perhaps still open: reported once closed, or quiet
			}
			evs = append(evs, event{path: filepath.Join(dir, name), op: op})
		}
	}
	for name := range old {
		if _, ok := now[name]; !ok {
			evs = append(evs, event{path: filepath.Join(dir, name), op: opGone})
		}
	}
	return evs
}

// same reports whether e, recorded earlier, still describes the entry now
// recorded as f: a racy e never does.
func (e entry) same(f entry) bool {
	return !e.racy && e.mode == f.mode && e.size == f.size && e.mtime == f.mtime && e.ctime == f.ctime &&
		e.ino == f.ino && e.target == f.target
}

// read returns the entries of dir.
func (s *snapshot) read(dir string) (map[string]entry, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	m := make(map[string]entry, len(names))
	for _, name := range names {
		p := filepath.Join(dir, name)
		info, err := os.Lstat(p)
		if err != nil {
			continue // removed meanwhile
		}
		m[name] = s.entryOf(p, info, now)
	}
	return m, nil
}

// entryOf describes the entry at p, with info from Lstat, recorded at now.
func (s *snapshot) entryOf(p string, info fs.FileInfo, now time.Time) entry {
	e := entry{mode: info.Mode(), size: info.Size(), mtime: info.ModTime().UnixNano()}
	e.ctime, e.ino = sysStat(info)
	if e.mode&fs.ModeSymlink != 0 {
		e.target, _ = os.Readlink(p)
	}
	changed := max(e.mtime, e.ctime)
	e.racy = changed > now.Add(-s.racy).UnixNano()
	return e
}
