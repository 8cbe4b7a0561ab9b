// Package resp implements the RESP3 subset spoken by the Azure IoT Operations
// state store (statestore-protocol.md §5, §7, §13.3): requests are arrays of
// bulk strings, replies are one of +OK, :<int>, $-1, $<n> bulk or -ERR <text>,
// and notifications are NOTIFY arrays.
//
// Everything is binary safe: framing is by declared length, never by scanning
// for CRLF inside data. Parsers are strict (anything outside the grammar is an
// error) and never allocate in proportion to a declared count or length that
// the input cannot back.
package resp

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrSyntax reports input that does not match the grammar. Errors returned by
// the parsers wrap it and say where the input went wrong.
var ErrSyntax = errors.New("resp: syntax error")

// Canonical reply payloads (statestore-protocol.md §7).
var (
	OK         = []byte("+OK\r\n")
	NotApplied = []byte(":-1\r\n")
	Nil        = []byte("$-1\r\n")
	One        = []byte(":1\r\n")
	Zero       = []byte(":0\r\n")
)

// maxLen bounds a count or length so that arithmetic on it cannot overflow.
const maxLen = 1<<31 - 1

func syntaxf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrSyntax}, args...)...)
}

// AppendBulk appends one bulk string `$<len>\r\n<b>\r\n` to dst.
func AppendBulk(dst, b []byte) []byte {
	dst = append(dst, '$')
	dst = strconv.AppendInt(dst, int64(len(b)), 10)
	dst = append(dst, '\r', '\n')
	dst = append(dst, b...)
	return append(dst, '\r', '\n')
}

// AppendRequest appends a request (an array of bulk strings) to dst.
func AppendRequest(dst []byte, args ...[]byte) []byte {
	dst = append(dst, '*')
	dst = strconv.AppendInt(dst, int64(len(args)), 10)
	dst = append(dst, '\r', '\n')
	for _, a := range args {
		dst = AppendBulk(dst, a)
	}
	return dst
}

// RequestSize is the exact number of bytes AppendRequest appends for args.
func RequestSize(args ...[]byte) int {
	n := 1 + digits(len(args)) + 2
	for _, a := range args {
		n += 1 + digits(len(a)) + 2 + len(a) + 2
	}
	return n
}

func digits(n int) int {
	d := 1
	for n >= 10 {
		n /= 10
		d++
	}
	return d
}

// EncodeRequest returns the request `*<n>\r\n` followed by one bulk per arg.
func EncodeRequest(args ...[]byte) []byte {
	return AppendRequest(make([]byte, 0, RequestSize(args...)), args...)
}

// ParseRequest decodes a request payload into its arguments. The returned
// slices alias b. The grammar is exactly `"*" count CRLF count*bulk` with
// count >= 1 and nothing after the last bulk; any deviation is an error
// wrapping ErrSyntax.
func ParseRequest(b []byte) ([][]byte, error) {
	if len(b) == 0 || b[0] != '*' {
		return nil, syntaxf("request must start with '*'")
	}
	n, pos, err := parseLen(b, 1)
	if err != nil {
		return nil, fmt.Errorf("array count: %w", err)
	}
	if n == 0 {
		return nil, syntaxf("empty array")
	}
	// Each bulk needs at least 6 bytes ("$0\r\n\r\n"): never preallocate more
	// slots than the input can hold.
	args := make([][]byte, 0, min(n, (len(b)-pos)/6+1))
	for i := 0; i < n; i++ {
		var arg []byte
		arg, pos, err = parseBulk(b, pos)
		if err != nil {
			return nil, fmt.Errorf("argument %d: %w", i, err)
		}
		if arg == nil {
			return nil, syntaxf("argument %d: null bulk in request", i)
		}
		args = append(args, arg)
	}
	if pos != len(b) {
		return nil, syntaxf("%d trailing bytes after request", len(b)-pos)
	}
	return args, nil
}

// parseLen reads 1*DIGIT CRLF starting at pos and returns the number and the
// position after CRLF.
func parseLen(b []byte, pos int) (int, int, error) {
	start := pos
	n := 0
	for pos < len(b) && b[pos] >= '0' && b[pos] <= '9' {
		n = n*10 + int(b[pos]-'0')
		if n > maxLen {
			return 0, 0, syntaxf("number too large at offset %d", start)
		}
		pos++
	}
	if pos == start {
		return 0, 0, syntaxf("expected digits at offset %d", start)
	}
	if pos+1 >= len(b) || b[pos] != '\r' || b[pos+1] != '\n' {
		return 0, 0, syntaxf("expected CRLF at offset %d", pos)
	}
	return n, pos + 2, nil
}

// parseBulk reads `$<len>\r\n<data>\r\n` (or `$-1\r\n`, returned as nil data)
// at pos and returns the data (aliasing b) and the position after it.
func parseBulk(b []byte, pos int) ([]byte, int, error) {
	if pos >= len(b) || b[pos] != '$' {
		return nil, 0, syntaxf("expected '$' at offset %d", pos)
	}
	if len(b)-pos >= 5 && string(b[pos:pos+5]) == "$-1\r\n" {
		return nil, pos + 5, nil
	}
	n, pos, err := parseLen(b, pos+1)
	if err != nil {
		return nil, 0, err
	}
	if n > len(b)-pos || len(b)-pos-n < 2 {
		return nil, 0, syntaxf("bulk of %d bytes runs past the end of the input", n)
	}
	data := b[pos : pos+n : pos+n]
	pos += n
	if b[pos] != '\r' || b[pos+1] != '\n' {
		return nil, 0, syntaxf("bulk of %d bytes not followed by CRLF", n)
	}
	return data, pos + 2, nil
}

// Kind is the type of a reply.
type Kind uint8

// Reply kinds.
const (
	KindInvalid Kind = iota
	KindSimple       // +<text>
	KindError        // -<text>
	KindInteger      // :<n>
	KindBulk         // $<n> data
	KindNil          // $-1
	KindArray        // *<n> ...: a SCAN reply (checked; its parts: ParseScanReply)
)

func (k Kind) String() string {
	switch k {
	case KindSimple:
		return "simple string"
	case KindError:
		return "error"
	case KindInteger:
		return "integer"
	case KindBulk:
		return "bulk string"
	case KindNil:
		return "nil"
	case KindArray:
		return "array"
	}
	return "invalid"
}

// Reply is a decoded reply payload.
type Reply struct {
	Kind Kind
	// Str is the text of a simple string or error (for `-ERR <text>` just
	// <text>), the data of a bulk string, or the whole of an array (for
	// ParseScanReply). It aliases the parsed input.
	Str []byte
	// Int is the value of an integer reply.
	Int int64
}

// ParseReply decodes a single reply payload; trailing bytes are an error.
func ParseReply(b []byte) (Reply, error) {
	if len(b) == 0 {
		return Reply{}, syntaxf("empty reply")
	}
	switch b[0] {
	case '+', '-', ':':
		line, err := parseLine(b)
		if err != nil {
			return Reply{}, err
		}
		switch b[0] {
		case '+':
			return Reply{Kind: KindSimple, Str: line}, nil
		case '-':
			if len(line) >= 4 && string(line[:4]) == "ERR " {
				line = line[4:]
			}
			return Reply{Kind: KindError, Str: line}, nil
		default:
			n, err := strconv.ParseInt(string(line), 10, 64)
			if err != nil {
				return Reply{}, syntaxf("integer reply %q", line)
			}
			return Reply{Kind: KindInteger, Int: n}, nil
		}
	case '$':
		data, pos, err := parseBulk(b, 0)
		if err != nil {
			return Reply{}, err
		}
		if pos != len(b) {
			return Reply{}, syntaxf("%d trailing bytes after bulk reply", len(b)-pos)
		}
		if data == nil {
			return Reply{Kind: KindNil}, nil
		}
		return Reply{Kind: KindBulk, Str: data}, nil
	case '*':
		// SCAN's is the protocol's only array reply.
		if _, _, _, err := ParseScanReply(b); err != nil {
			return Reply{}, err
		}
		return Reply{Kind: KindArray, Str: b}, nil
	}
	return Reply{}, syntaxf("unknown reply type %q", b[0])
}

// parseLine returns the text between the type byte and the single CRLF that
// must end b.
func parseLine(b []byte) ([]byte, error) {
	end := len(b) - 2
	if end < 1 || b[end] != '\r' || b[end+1] != '\n' {
		return nil, syntaxf("reply not terminated by CRLF")
	}
	line := b[1:end]
	for _, c := range line {
		if c == '\r' || c == '\n' {
			return nil, syntaxf("CR or LF inside a line reply")
		}
	}
	return line, nil
}

// AppendError appends `-ERR <text>\r\n`. Text must not contain CR or LF.
func AppendError(dst []byte, text string) []byte {
	dst = append(dst, "-ERR "...)
	dst = append(dst, text...)
	return append(dst, '\r', '\n')
}

// AppendInt appends `:<n>\r\n`.
func AppendInt(dst []byte, n int64) []byte {
	dst = append(dst, ':')
	dst = strconv.AppendInt(dst, n, 10)
	return append(dst, '\r', '\n')
}

// Notification operations (statestore-protocol.md §13.3).
const (
	OpSet    = "SET"
	OpDelete = "DELETE"
)

var (
	notifyDelete    = []byte("*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n")
	notifySetPrefix = []byte("*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n")
)

// AppendNotifySet appends the NOTIFY body of an applied SET carrying value.
func AppendNotifySet(dst, value []byte) []byte {
	dst = append(dst, notifySetPrefix...)
	return AppendBulk(dst, value)
}

// AppendNotifyDelete appends the NOTIFY body of a removal or expiry.
func AppendNotifyDelete(dst []byte) []byte {
	return append(dst, notifyDelete...)
}

// Notify is a decoded NOTIFY body.
type Notify struct {
	// Op is the operation word, OpSet or OpDelete for a conforming server;
	// other words are passed through.
	Op string
	// Value is the new value of a SET (empty but non-nil for an empty
	// value); nil when the body carries no VALUE.
	Value []byte
}

// ParseNotify decodes a NOTIFY body: an array of 2 bulks (NOTIFY, op) or 4
// bulks (NOTIFY, op, VALUE, value).
func ParseNotify(b []byte) (Notify, error) {
	args, err := ParseRequest(b)
	if err != nil {
		return Notify{}, fmt.Errorf("notify: %w", err)
	}
	if len(args) != 2 && len(args) != 4 {
		return Notify{}, syntaxf("notify: %d elements, want 2 or 4", len(args))
	}
	if string(args[0]) != "NOTIFY" {
		return Notify{}, syntaxf("notify: first element %q, want NOTIFY", args[0])
	}
	n := Notify{Op: string(args[1])}
	if len(args) == 4 {
		if string(args[2]) != "VALUE" {
			return Notify{}, syntaxf("notify: third element %q, want VALUE", args[2])
		}
		n.Value = args[3]
	}
	return n, nil
}
