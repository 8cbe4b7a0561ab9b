package ssrun

import "github.com/ssrun/ssrun/abi"

// The verbs of ABI revision 3: key families. A rule that never calls them
// does not import them, so it also loads on a host of revisions 1 and 2.

// KeysOptions are the options of Keys.
type KeysOptions = abi.KeysOptions

// StatusLimit: a bound was reached (more keys match than Keys' limit, or
// a pattern watch would pass the rule's max_watched_keys).
const StatusLimit = abi.StatusLimit

// Bounds of Keys' limit.
const (
	DefaultKeysLimit = abi.DefaultKeysLimit
	MaxKeysLimit     = abi.MaxKeysLimit
)

// Keys returns the keys matching pattern, sorted bytewise, that the rule
// may read. The pattern is the glob of the ACL's keyType Pattern: `*` any
// run of characters ('/' included), `?` one character, `[a-z]`, `[!a-z]`
// and `\x` for x itself. opts.Limit (DefaultKeysLimit when 0, at most
// MaxKeysLimit) bounds the list: when more keys match, Keys fails with
// StatusLimit, never with a cut list. StatusInvalid for a malformed
// pattern or a limit out of range, StatusDenied for a pattern no key the
// rule may read can match. At most one KeysOptions.
func Keys(pattern string, opts ...KeysOptions) ([]string, error) { return keys(pattern, opts) }

// WatchPattern delivers changes of every key matching pattern (the glob of
// Keys) to the handler: an OpSet event (Resync set) for each key that
// exists when it is called and for each key created later, every change
// of those keys, and an OpDelete when one goes away. Not the rule's own
// writes, unless opts.Self. Idempotent. StatusLimit when the rule would
// watch more than its max_watched_keys keys. At most one WatchOptions.
func WatchPattern(pattern string, opts ...WatchOptions) error { return watchPattern(pattern, opts) }

// UnwatchPattern stops WatchPattern's deliveries for pattern;
// StatusNotFound when the pattern is not watched.
func UnwatchPattern(pattern string) error { return unwatchPattern(pattern) }
