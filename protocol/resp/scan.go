package resp

import "strconv"

// SCAN (statestore-protocol.md §6, "SCAN pattern [token]"): its reply is an
// array of one or two elements: the page's keys (an array of bulk strings,
// possibly empty), then, only when more pages follow, the token to send
// back for the next page.

// AppendScanReply appends a SCAN reply: keys, and token when more pages
// follow (nil: the last page).
func AppendScanReply(dst []byte, keys [][]byte, token []byte) []byte {
	n := int64(1)
	if token != nil {
		n = 2
	}
	dst = append(dst, '*')
	dst = strconv.AppendInt(dst, n, 10)
	dst = append(dst, "\r\n*"...)
	dst = strconv.AppendInt(dst, int64(len(keys)), 10)
	dst = append(dst, '\r', '\n')
	for _, k := range keys {
		dst = AppendBulk(dst, k)
	}
	if token != nil {
		dst = AppendBulk(dst, token)
	}
	return dst
}

// KeySize is what one key adds to a SCAN reply.
func KeySize(key []byte) int { return 1 + digits(len(key)) + 2 + len(key) + 2 }

// ParseScanReply decodes a SCAN reply strictly: one or two elements, the
// first an array of bulk strings (no null array, no null key), the second,
// when present, the token (a non-null bulk string); nothing after. more
// reports whether a token came. The slices alias b.
func ParseScanReply(b []byte) (keys [][]byte, token []byte, more bool, err error) {
	if len(b) == 0 || b[0] != '*' {
		return nil, nil, false, syntaxf("SCAN reply must be an array")
	}
	n, pos, err := parseLen(b, 1)
	if err != nil {
		return nil, nil, false, syntaxf("SCAN reply: array count: %v", err)
	}
	if n != 1 && n != 2 {
		return nil, nil, false, syntaxf("SCAN reply has %d elements, want 1 or 2", n)
	}
	if pos >= len(b) || b[pos] != '*' {
		return nil, nil, false, syntaxf("SCAN reply: element 1 is not an array")
	}
	k, pos, err := parseLen(b, pos+1)
	if err != nil {
		return nil, nil, false, syntaxf("SCAN reply: key count: %v", err)
	}
	// Each key needs at least 6 bytes ("$0\r\n\r\n"): never preallocate more
	// than the input can hold.
	keys = make([][]byte, 0, min(k, (len(b)-pos)/6+1))
	for i := 0; i < k; i++ {
		var key []byte
		key, pos, err = parseBulk(b, pos)
		if err != nil {
			return nil, nil, false, syntaxf("SCAN reply: key %d: %v", i, err)
		}
		if key == nil {
			return nil, nil, false, syntaxf("SCAN reply: key %d is null", i)
		}
		keys = append(keys, key)
	}
	if n == 2 {
		if pos >= len(b) {
			return nil, nil, false, syntaxf("SCAN reply: token missing")
		}
		token, pos, err = parseBulk(b, pos)
		if err != nil {
			return nil, nil, false, syntaxf("SCAN reply: token: %v", err)
		}
		if token == nil {
			return nil, nil, false, syntaxf("SCAN reply: token is null")
		}
		more = true
	}
	if pos != len(b) {
		return nil, nil, false, syntaxf("SCAN reply: %d trailing bytes", len(b)-pos)
	}
	return keys, token, more, nil
}
